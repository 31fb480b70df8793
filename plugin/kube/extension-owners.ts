// Extension registrations made by a pod (its namespace, name and uid recorded with them) go
// with that pod: every 2 s kni looks whether each owner is still there. An owner on this node
// (a mesh's node agent, the usual one) is looked up in kni's watch of this node's Pods, with no
// request; only one that is not there (gone, on another node, the watch not listed yet) is
// asked of the API server, and not every round: with one owner per node, a request from every
// node every 2 s would be hundreds a second in a large cluster, the more so in the minutes after
// a mesh's DaemonSet is deleted, when every node's owner is gone at once. So the API server is
// asked about one registration at most every tenth of ownerGraceSeconds (2 s at the least), and
// an owner it has said is gone (no pod of that name, or another pod under it: a uid never comes
// back) is not asked about again.
import type { Config } from '../core/config';
import { log } from '../core/log';
import type { ExtensionRegistry } from '../extensions/extension-registry';
import type { KubeApi } from './kube-api';

const CHECK_MS = 2000;

/** What the owner check knows of one registration's owner. */
interface OwnerSeen {
  /** The owner it is about (namespace/name/uid): a registration made again by another pod starts afresh. */
  owner: string;
  /** When the API server was last asked. */
  askedAt?: number;
  /** Since when the owner has been gone; `final`: the API server said so of a uid, which never comes back. */
  goneSince?: number;
  final?: boolean;
}

export class ExtensionOwners {
  private timer?: NodeJS.Timeout;
  /** Extension name → what is known of the pod that registered it. */
  private readonly seen = new Map<string, OwnerSeen>();

  private checking = false;
  /** The uid of a Pod on this node, as kni's watch of them has it (PodNetworks.podUid). */
  localPodUid?: (namespace: string, name: string) => string | undefined;

  constructor(private readonly api: KubeApi, private readonly extensions: ExtensionRegistry, private readonly cfg: Pick<Config, 'extensions'>) {}

  start(): void {
    this.timer = setInterval(() => {
      // One round at a time: a slow API server does not stack them up.
      if (this.checking) return;
      this.checking = true;
      void this.check().finally(() => (this.checking = false));
    }, CHECK_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** How often the API server may be asked about one owner. */
  private get askEveryMs(): number {
    return Math.max(CHECK_MS, (this.cfg.extensions.ownerGraceSeconds * 1000) / 10);
  }

  /**
   * A registration made by a pod that has been gone (or replaced by another pod of the same
   * name) longer than extensions.ownerGraceSeconds is dropped. While the API server cannot
   * tell, nothing is dropped.
   */
  private async check(): Promise<void> {
    const owned = this.extensions.owned();
    const names = new Set(owned.map((r) => r.name));
    for (const name of this.seen.keys()) if (!names.has(name)) this.seen.delete(name);
    for (const reg of owned) {
      const owner = `${reg.owner.namespace}/${reg.owner.name}/${reg.owner.uid}`;
      let seen = this.seen.get(reg.name);
      if (seen?.owner !== owner) this.seen.set(reg.name, (seen = { owner }));
      const gone = await this.ownerGone(reg.owner, seen);
      if (gone === undefined) continue;
      if (!gone) {
        seen.goneSince = undefined;
        continue;
      }
      seen.goneSince ??= Date.now();
      if (Date.now() - seen.goneSince < this.cfg.extensions.ownerGraceSeconds * 1000) continue;
      this.seen.delete(reg.name);
      log('warn', 'extension dropped: the pod that registered it is gone', { extension: reg.name, owner: `${reg.owner.namespace}/${reg.owner.name}`, graceSeconds: this.cfg.extensions.ownerGraceSeconds });
      this.extensions.unregister(reg.name);
    }
  }

  /** Whether the owner is gone; undefined: no news this round (not asked, or the API server could not tell). */
  private async ownerGone(o: { namespace: string; name: string; uid: string }, seen: OwnerSeen): Promise<boolean | undefined> {
    const here = this.localPodUid?.(o.namespace, o.name);
    if (here !== undefined && (!o.uid || here === o.uid)) return false;
    if (seen.final) return true;
    if (seen.askedAt !== undefined && Date.now() - seen.askedAt < this.askEveryMs) return undefined;
    seen.askedAt = Date.now();
    let gone: boolean;
    try {
      const pod = await this.api.core.readNamespacedPod({ namespace: o.namespace, name: o.name });
      gone = !!o.uid && pod.metadata?.uid !== o.uid;
    } catch (e) {
      if ((e as { code?: number }).code !== 404) return undefined;
      gone = true;
    }
    // Without a uid a pod of that name may come back: asked again, at the same pace.
    if (gone && o.uid) seen.final = true;
    return gone;
  }
}
