// Pod network changes as a stream: every attach and detach (and each interface they add or
// remove), repair, address restored, release by reconcile and extension failure gets a
// sequence number in this process's event log. A watcher resumes
// after the last event it saw with its token ("<boot>-<seq>"); the log keeps the last
// EVENT_LOG_SIZE events, so a watcher away for longer (or from before a kni restart) is told to
// re-list instead of silently missing changes.
import crypto from 'node:crypto';
import { KniError } from './errors';
import { InterfaceRecord, PodRef, SandboxRecord } from '../store/records';

export type PodEventType = 'attached' | 'detached' | 'interface_added' | 'interface_removed' | 'address_changed' | 'repaired' | 'released' | 'extension_failed';

export interface PodEvent {
  seq: number;
  token: string;
  type: PodEventType;
  sandboxId: string;
  pod: PodRef;
  netnsPath: string;
  interfaces: InterfaceRecord[];
  message: string;
  /** When, in ms since the epoch: turned into text only for a watcher (three dates an attach, cold, were ≈ 15 µs of it). */
  timeMs: number;
}

export const EVENT_LOG_SIZE = 10_000;

export class EventLog {
  readonly boot = crypto.randomBytes(6).toString('hex');
  private seq = 0;
  /**
   * The last `size` events, event n at (n - 1) % size. A ring, not push and shift: once the
   * log was full, each shift while the GC marked moved all 10,000 slots, with a write barrier
   * per slot, twice an attach and twice a detach (callgrind: up to 215,000 instructions a
   * shift; docs/performance-history.md).
   */
  private readonly ring: PodEvent[] = [];
  private readonly listeners = new Set<(e: PodEvent) => void>();

  constructor(private readonly size = EVENT_LOG_SIZE) {}

  /** One event; `interfaces` narrows it to some of the pod's interfaces (interface_added …). */
  emit(type: PodEventType, rec: SandboxRecord, message = '', interfaces: InterfaceRecord[] = rec.interfaces): void {
    const seq = ++this.seq;
    const e: PodEvent = {
      seq, token: this.token(seq), type, sandboxId: rec.id, pod: rec.pod, netnsPath: rec.netnsPath,
      interfaces, message, timeMs: Date.now(),
    };
    this.ring[(seq - 1) % this.size] = e;
    for (const l of this.listeners) l(e);
  }

  /** The events after a token ('' = none: only what comes). Refused when they are no longer all kept. */
  since(token: string): PodEvent[] {
    if (!token) return [];
    const m = /^([0-9a-f]{12})-(\d{1,15})$/.exec(token);
    if (!m) throw new KniError('INVALID_ARGUMENT', `resume token ${JSON.stringify(token.slice(0, 64))} is not one kni gave`);
    if (m[1] !== this.boot) throw new KniError('FAILED_PRECONDITION', 'kni restarted since that resume token: what happened meanwhile is not in its event log; list the pods (ListPods) and watch from now');
    const after = Number(m[2]);
    if (after > this.seq) throw new KniError('INVALID_ARGUMENT', `resume token ${token} is ahead of the event log`);
    const oldest = Math.max(1, this.seq - this.size + 1);
    if (after + 1 < oldest) throw new KniError('FAILED_PRECONDITION', `the event log no longer holds the events after ${token} (it keeps the last ${this.size}); list the pods (ListPods) and watch from now`);
    const out: PodEvent[] = [];
    for (let n = after + 1; n <= this.seq; n++) out.push(this.ring[(n - 1) % this.size]);
    return out;
  }

  /** The token of the newest event (of none yet: its 0): resuming from it gives what comes next. */
  newest(): string {
    return this.token(this.seq);
  }

  private token(seq: number): string {
    return `${this.boot}-${seq}`;
  }

  /** Calls cb for every event from now on; returns the unsubscribe. */
  subscribe(cb: (e: PodEvent) => void): () => void {
    this.listeners.add(cb);
    return () => this.listeners.delete(cb);
  }
}

/** A sandbox attached: the pod, then each of its interfaces. */
export function emitAttached(log: EventLog, rec: SandboxRecord): void {
  log.emit('attached', rec);
  for (const i of rec.interfaces) log.emit('interface_added', rec, '', [i]);
}

/** A sandbox released: each interface, then the pod. */
export function emitDetached(log: EventLog, rec: SandboxRecord): void {
  for (const i of rec.interfaces) log.emit('interface_removed', rec, '', [i]);
  log.emit('detached', rec);
}
