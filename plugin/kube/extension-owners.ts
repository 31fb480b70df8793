// Extension registrations made by a pod (its namespace, name and uid recorded with them) go
// with that pod: every 2 s kni looks whether each owner is still there. An owner on this node
// (a mesh's node agent, the usual one) is looked up in kni's watch of this node's Pods, with no
// request; only one that is not there (gone, on another node, the watch not listed yet) is
// asked of the API server: with one owner per node, a request from every node every 2 s would
// be hundreds a second in a large cluster.
import type { Config } from '../core/config';
import { log } from '../core/log';
import type { ExtensionRegistry } from '../extensions/extension-registry';
import type { KubeApi } from './kube-api';

const CHECK_MS = 2000;

export class ExtensionOwners {
  private timer?: NodeJS.Timeout;
  /** Extension name → when its registering pod was first found gone. */
  private readonly gone = new Map<string, number>();

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

  /**
   * A registration made by a pod that has been gone (or replaced by another pod of the same
   * name) longer than extensions.ownerGraceSeconds is dropped. While the API server cannot
   * tell, nothing is dropped.
   */
  private async check(): Promise<void> {
    for (const reg of this.extensions.owned()) {
      let gone: boolean;
      const here = this.localPodUid?.(reg.owner.namespace, reg.owner.name);
      if (here !== undefined && (!reg.owner.uid || here === reg.owner.uid)) {
        gone = false;
      } else {
        try {
          const pod = await this.api.core.readNamespacedPod({ namespace: reg.owner.namespace, name: reg.owner.name });
          gone = !!reg.owner.uid && pod.metadata?.uid !== reg.owner.uid;
        } catch (e) {
          if ((e as { code?: number }).code !== 404) continue;
          gone = true;
        }
      }
      if (!gone) {
        this.gone.delete(reg.name);
        continue;
      }
      const since = this.gone.get(reg.name) ?? Date.now();
      this.gone.set(reg.name, since);
      if (Date.now() - since < this.cfg.extensions.ownerGraceSeconds * 1000) continue;
      this.gone.delete(reg.name);
      log('warn', 'extension dropped: the pod that registered it is gone', { extension: reg.name, owner: `${reg.owner.namespace}/${reg.owner.name}`, graceSeconds: this.cfg.extensions.ownerGraceSeconds });
      this.extensions.unregister(reg.name);
    }
  }
}
