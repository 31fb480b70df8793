// MultiNetworkPolicy on this node: for each pod of this node with an interface on a secondary
// network, its table in its own netns (multi-ruleset.ts), written through a libnftables context
// made inside that netns (no process spawned, no netns entered per write).
// - A pod's table is written inside its attach, before its interfaces exist (the table matches
//   them by name): no packet of theirs passes ahead of their policies.
// - Any other change (a policy, a namespace's labels, a pod's labels or its addresses on a
//   network, an interface added) writes again, WRITE_DELAY_MS after it, the table of each pod
//   whose text changed.
// - The table lives in the pod's netns: it goes with the pod, and stays while kni is down.
import { log } from '../core/log';
import { inNetns } from '../netns/netns';
import { reopenRecordedNetns } from '../netns/open-netns';
import type { SandboxRecord } from '../store/records';
import { NftContext } from '../sys/libnftables';
import { MultiModel, onNetwork } from './multi-policies';
import { multiTableScript, NetworkInterface, REMOVE_MULTI_TABLE } from './multi-ruleset';
import { PolicyPod } from './policy-model';

const WRITE_DELAY_MS = 20;

interface LocalMultiPod {
  /** The record, as the attach fills it in (its interfaces' addresses come from their plugins). */
  rec: SandboxRecord;
  pod: PolicyPod;
  ctx?: NftContext;
  /** The text last written (a write is skipped when it would be the same). */
  written?: string;
  /** Admitted at its attach: its netns holds no table of kni's yet (one found at start may). */
  fresh: boolean;
}

/** A pod's interfaces on secondary networks, as its record holds them now. */
export const networkInterfaces = (rec: SandboxRecord): NetworkInterface[] =>
  rec.interfaces.filter((i) => i.network && !i.removing).map((i) => ({ name: i.name, network: i.network!, ips: i.addresses.map((a) => a.address) }));

export class MultiPolicyEnforcer {
  private model?: MultiModel;
  /** This node's pods with secondary interfaces, by sandbox id. */
  private readonly local = new Map<string, LocalMultiPod>();
  /** The cluster's pods by "namespace/name", with their addresses per network. */
  private readonly peers = new Map<string, { pod: PolicyPod; addresses: ReadonlyMap<string, string[]> }>();
  private timer?: NodeJS.Timeout;
  private queue: Promise<void> = Promise.resolve();

  get currentModel(): MultiModel | undefined {
    return this.model;
  }

  setModel(model: MultiModel): void {
    this.model = model;
    this.changed();
  }

  /** A pod of the cluster came or changed (undefined: it went). */
  setPod(key: string, pod: PolicyPod | undefined, addresses: ReadonlyMap<string, string[]> = new Map()): void {
    if (pod && addresses.size) this.peers.set(key, { pod, addresses });
    else if (!this.peers.delete(key)) return;
    this.changed();
  }

  /** A pod of this node: at its attach (written now), or from the records at start (written with the next write). */
  async admit(rec: SandboxRecord, pod: PolicyPod, now = true): Promise<void> {
    if (!networkInterfaces(rec).length) return;
    const had = this.local.get(rec.id);
    this.local.set(rec.id, { rec, pod, ctx: had?.ctx, written: had?.written, fresh: now && !had });
    if (now) await this.write(rec.id);
    else this.changed();
  }

  /** A pod of this node whose labels or ports changed. */
  updateLocal(namespace: string, name: string, change: Pick<PolicyPod, 'labels' | 'ports'>): void {
    for (const l of this.local.values()) {
      if (l.pod.namespace === namespace && l.pod.name === name) {
        l.pod = { ...l.pod, ...change };
        this.changed();
      }
    }
  }

  /** A pod of this node gone: its table goes with its netns. */
  release(id: string): void {
    this.local.get(id)?.ctx?.close();
    this.local.delete(id);
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    for (const l of this.local.values()) l.ctx?.close();
    this.local.clear();
  }

  /** Every pod's table as the state is now (each one whose text changed, or all with `force`). */
  writeAll(force = false): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    for (const id of this.local.keys()) {
      this.write(id, force).catch((e) => log('warn', 'cannot write the MultiNetworkPolicy table in a pod; the next change writes it again', { sandbox: id, error: (e as Error).message }));
    }
  }

  private changed(): void {
    if (!this.model || this.timer) return;
    this.timer = setTimeout(() => this.writeAll(), WRITE_DELAY_MS);
    this.timer.unref();
  }

  private peersOn(network: string): PolicyPod[] {
    const out: PolicyPod[] = [];
    for (const { pod, addresses } of this.peers.values()) {
      const p = onNetwork(pod, addresses, network);
      if (p) out.push(p);
    }
    return out;
  }

  /** One pod's table, after the writes before it. */
  private write(id: string, force = false): Promise<void> {
    const next = this.queue.then(async () => {
      const l = this.local.get(id);
      if (!l || !this.model) return;
      const text = multiTableScript(this.model, l.pod, networkInterfaces(l.rec), (n) => this.peersOn(n));
      if (!force && text === l.written) return;
      // No policy for its networks and none ever written: nothing to do, not even a context.
      if (l.fresh && !l.written && !l.ctx && text === REMOVE_MULTI_TABLE) return;
      l.ctx ??= contextIn(l.rec);
      if (!l.ctx) return this.release(id);
      await l.ctx.run(text, `the MultiNetworkPolicy table of pod ${l.pod.namespace}/${l.pod.name}`);
      l.written = text;
    });
    this.queue = next.catch(() => undefined);
    return next;
  }
}

/** A libnftables context inside a sandbox's netns; undefined when its netns is gone (or is another one now). */
function contextIn(rec: SandboxRecord): NftContext | undefined {
  const ns = reopenRecordedNetns(rec.netnsPath, rec.netnsInode);
  if (ns.state !== 'same') return undefined;
  try {
    return inNetns(ns.handle.fd, () => new NftContext());
  } finally {
    ns.handle.close();
  }
}
