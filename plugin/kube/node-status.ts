// What kni writes on its Node: conditions (NetworkUnavailable, kni.dev/IPAMExhausted) and the
// NoSchedule taint kni.dev/ipam-exhausted. A condition is written only when its status or
// reason changes, never for its message alone: every Node watcher in the cluster receives each
// write, so a message that followed a count (the peers, the routes missing) would make every
// node's join a write by every kni. The message is the state when the condition last changed;
// knictl node and the metrics have the current one. Writes are retried until the API server
// takes them (it may be away for a while).
import { log } from '../core/log';
import { apiError, isConflict, KubeApi, withTimeout } from './kube-api';
import { recordEvent } from './kube-events';

export const IPAM_EXHAUSTED_CONDITION = 'kni.dev/IPAMExhausted';
export const IPAM_EXHAUSTED_TAINT = 'kni.dev/ipam-exhausted';

export interface WantedCondition {
  type: string;
  status: 'True' | 'False';
  reason: string;
  message: string;
}

const RETRY_MS = 5000;

/** What decides whether a condition is written again. */
const stateOf = (c: WantedCondition): string => `${c.status}\u0000${c.reason}`;

export class NodeStatusWriter {
  private wanted = new Map<string, WantedCondition>();
  private written = new Map<string, string>();
  private wantTaint?: boolean;
  private taintWritten?: boolean;
  private running = false;
  private again = false;
  private retry?: NodeJS.Timeout;

  constructor(private readonly api: KubeApi, private readonly node: string) {}

  setCondition(c: WantedCondition): void {
    this.wanted.set(c.type, c);
    this.kick();
  }

  setTaint(on: boolean): void {
    this.wantTaint = on;
    this.kick();
  }

  stop(): void {
    if (this.retry) clearTimeout(this.retry);
  }

  private kick(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    void this.flush().finally(() => {
      this.running = false;
      if (this.again) {
        this.again = false;
        this.kick();
      }
    });
  }

  private async flush(): Promise<void> {
    try {
      const due = [...this.wanted.values()].filter((c) => this.written.get(c.type) !== stateOf(c));
      if (due.length) {
        const now = new Date().toISOString();
        // Strategic merge: conditions merge by type, so the kubelet's own are untouched.
        const body = { status: { conditions: due.map((c) => ({ ...c, lastHeartbeatTime: now, lastTransitionTime: now })) } };
        await withTimeout(this.api.core.patchNodeStatus({ name: this.node, body }, this.api.k8s.setHeaderOptions('Content-Type', this.api.k8s.PatchStrategy.StrategicMergePatch)), 10_000, 'patch Node status');
        for (const c of due) {
          this.written.set(c.type, stateOf(c));
          log('info', 'Node condition set', { node: this.node, condition: c.type, status: c.status, message: c.message });
        }
      }
      if (this.wantTaint !== undefined && this.wantTaint !== this.taintWritten) await this.writeTaint(this.wantTaint);
    } catch (e) {
      log('warn', 'cannot update the Node; retrying', { node: this.node, error: apiError(e) });
      if (this.retry) clearTimeout(this.retry);
      this.retry = setTimeout(() => this.kick(), RETRY_MS);
      this.retry.unref();
    }
  }

  /** Read, change, write with the resourceVersion read: a concurrent writer makes us read again. */
  private async writeTaint(on: boolean): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      const node = await withTimeout(this.api.core.readNode({ name: this.node }), 10_000, 'read Node');
      const taints = (node.spec?.taints ?? []).filter((t) => t.key !== IPAM_EXHAUSTED_TAINT);
      const had = taints.length !== (node.spec?.taints ?? []).length;
      if (had === on) {
        this.taintWritten = on;
        return;
      }
      if (on) taints.push({ key: IPAM_EXHAUSTED_TAINT, effect: 'NoSchedule', timeAdded: new Date() });
      try {
        const body = { metadata: { resourceVersion: node.metadata?.resourceVersion }, spec: { taints } };
        await withTimeout(this.api.core.patchNode({ name: this.node, body }, this.api.k8s.setHeaderOptions('Content-Type', this.api.k8s.PatchStrategy.MergePatch)), 10_000, 'patch Node');
        this.taintWritten = on;
        log('info', on ? 'Node tainted: no more pods fit its pod range' : 'Node taint removed: addresses are free again', { node: this.node, taint: `${IPAM_EXHAUSTED_TAINT}:NoSchedule` });
        void recordEvent(this.api, { kind: 'Node', name: this.node, uid: node.metadata?.uid }, on ? 'Warning' : 'Normal', on ? 'IPAMExhausted' : 'IPAMAvailable', on ? `pod range exhausted: tainted ${IPAM_EXHAUSTED_TAINT}:NoSchedule (running pods are not evicted)` : `pod addresses free again: taint ${IPAM_EXHAUSTED_TAINT} removed`);
        return;
      } catch (e) {
        if (!isConflict(e) || attempt >= 5) throw e;
      }
    }
  }
}
