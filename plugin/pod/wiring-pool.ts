// Pod interfaces wired off the main thread (wiring-worker.ts), so that concurrent attaches
// overlap: while one thread waits on the kernel (veth creation, addresses, routes: ≈ 1–4 ms,
// most of an attach), the main thread decodes, validates, records and answers the others.
// The kernel serialises much of this work under its rtnl lock, so a few threads are enough:
// one per core, at most 4. Not one per spare core: on 2 vCPUs a second thread overlaps the
// work outside the lock (setns, the pod netns's socket, the thread's own JavaScript), and a
// Go client's 16 attaches at once went 1545 → 1780/s (median of 10 rounds, higher in 8 of 10;
// the reverse order 1688 → 1823, 8 of 10), for ≈ 12 MB more resident memory. A third thread
// gave nothing more (1809 against 1806/s), and wiring on the main thread while the one thread
// was busy was worse (1406/s): the main thread is the busier one at 16 at once.
//
// Every job has a deadline: a thread that does not answer in time is replaced and the attach
// fails (and is rolled back) instead of hanging with its sandbox locked — an earlier off-thread
// design lost a completion now and then (docs/performance.md).
import os from 'node:os';
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import { log } from '../core/log';
import { NetlinkError } from '../netlink/socket';
import { NotANetnsError } from '../netns/netns';
import { Errno } from '../sys/libc';
import { isLoadedMessage, startThread, stopThread, whenLoaded } from '../sys/threads';
import { InterfaceRecord } from '../store/records';
import { HostVethExistsError, PodInterfaceExistsError } from './pod-wiring';
import type { WireError, WireJob } from './wiring-worker';

const JOB_TIMEOUT_MS = 10_000;

function rebuild(e: WireError): Error {
  switch (e.kind) {
    case 'host-veth-exists': return new HostVethExistsError(e.hostVeth);
    case 'pod-interface-exists': return new PodInterfaceExistsError(e.ifName);
    case 'not-a-netns': return new NotANetnsError(e.message);
    case 'netlink': return new NetlinkError(e.errno, e.what, e.kernelMessage);
    case 'errno': return new Errno(e.call, e.errno);
    default: return new Error(e.message);
  }
}

interface Pending {
  resolve: () => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

class WiringThread {
  readonly worker: Worker;
  readonly pending = new Map<number, Pending>();

  constructor(onDead: (t: WiringThread, why: string) => void) {
    this.worker = startThread(path.join(__dirname, 'wiring-worker.js'));
    this.worker.on('message', (m: { seq: number; error?: WireError }) => {
      if (isLoadedMessage(m)) return;
      const p = this.pending.get(m.seq);
      if (!p) return;
      this.pending.delete(m.seq);
      clearTimeout(p.timer);
      if (m.error) p.reject(rebuild(m.error));
      else p.resolve();
    });
    this.worker.on('error', (e: Error) => onDead(this, e.message));
    this.worker.on('exit', (code) => onDead(this, `exited with ${code}`));
  }

  failAll(why: string): void {
    for (const [seq, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new Error(`wiring thread ${why}`));
      this.pending.delete(seq);
    }
  }
}

export class WiringPool {
  private threads: WiringThread[] = [];
  private seq = 0;
  private closed = false;

  constructor(private readonly size = Math.max(1, Math.min(4, os.availableParallelism()))) {}

  /**
   * Starts the threads now, ahead of the attaches that need them (the daemon calls it a second
   * after the node is ready): a thread takes ≈ 0.1 s of CPU to load its modules, and the first
   * pods of a node come together. Measured: a fresh daemon's first 16 attaches at once took
   * 127–146 ms with the threads started by them, 23–31 ms with the threads started ahead (7
   * daemons), for ≈ 23 MB more resident memory before the first pod (the threads' heaps, at
   * their limits in sys/threads.ts). Resolves with the number of threads once they are loaded;
   * after close, starts none.
   */
  async start(): Promise<number> {
    this.fill();
    await Promise.all(this.threads.map((t) => whenLoaded(t.worker)));
    return this.threads.length;
  }

  private fill(): void {
    if (this.closed) return;
    while (this.threads.length < this.size) this.threads.push(new WiringThread((t, why) => this.dead(t, why)));
  }

  private thread(): WiringThread {
    if (this.closed) throw new Error('the wiring threads are stopped: kni is shutting down');
    this.fill();
    return this.threads.reduce((a, b) => (b.pending.size < a.pending.size ? b : a));
  }

  private dead(t: WiringThread, why: string): void {
    if (!this.threads.includes(t)) return;
    this.threads = this.threads.filter((x) => x !== t);
    if (t.pending.size) log('error', 'a wiring thread went away; its attaches fail and are rolled back', { why, attaches: t.pending.size });
    t.failAll(why);
    stopThread(t.worker);
  }

  /** Wires one interface in the netns open on netnsFd (kept open by the caller until this settles). */
  wire(netnsFd: number, bridgeIndex: number, itf: InterfaceRecord, sandboxId: string): Promise<void> {
    const t = this.thread();
    const seq = ++this.seq;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        t.pending.delete(seq);
        reject(new Error(`the wiring thread did not answer within ${JOB_TIMEOUT_MS / 1000} s`));
        this.dead(t, 'did not answer in time');
      }, JOB_TIMEOUT_MS);
      t.pending.set(seq, { resolve, reject, timer });
      const job: WireJob = { seq, netnsFd, bridgeIndex, itf, sandboxId };
      t.worker.postMessage(job);
    });
  }

  close(): void {
    this.closed = true;
    for (const t of this.threads) {
      t.failAll('stopped');
      stopThread(t.worker);
    }
    this.threads = [];
  }
}
