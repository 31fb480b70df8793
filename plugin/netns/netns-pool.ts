// Network namespaces made ahead of the KNI POC CreateNetwork, where kni makes the pod's netns.
// Making one is that call's slowest step, the kernel's (a loopback device, per-netns sysctl
// tables, IPv4 and IPv6 set up: 0.4–0.5 ms back to back here, most of the call's ≈ 1.2 ms in the
// daemon); pinning one that exists is a bind mount (≈ 0.05 ms). A thread of its
// own (netns-pool-worker.ts) makes them once the calls pause, so the main thread never blocks
// on it and a pod's attach does not wait behind it for the kernel's locks.
//
// The pool holds them as open descriptors only, never pinned: a crash or a stop leaves nothing,
// since the kernel frees a netns once its last descriptor is closed. It starts at the first
// take (a node whose runtime makes its own netns never has one).
//
// A new netns copies the node's IPv4 interface settings (net.ipv4.conf.all and .default, with
// net.core.devconf_inherit_init_net at its default) when it is made, so one kept long would
// miss a change made since: one older than maxAgeMs is closed instead of handed out.
import fs from 'node:fs';
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import { log } from '../core/log';
import { isLoadedMessage, startThread } from '../sys/threads';
import type { PoolReply, PoolRequest } from './netns-pool-worker';

const NETNS_MAX_AGE_MS = 60_000;
/** The pool is topped up after this long without a take. */
const TOP_UP_AFTER_IDLE_MS = 20;
/** After the thread fails to make one (out of memory, a limit on namespaces), the pool waits this long before asking again. */
const RETRY_MS = 10_000;

interface Entry {
  fd: number;
  madeAt: number;
}

export class NetnsPool {
  private readonly entries: Entry[] = [];
  private worker?: Worker;
  /** Asked of the thread and not yet come back. */
  private asked = 0;
  private failedAt = -Infinity;
  private closed = false;
  private topUpTimer?: NodeJS.Timeout;
  private idleTimer?: NodeJS.Timeout;

  /** size is read at each take (a live setting): 0 turns the pool off. */
  constructor(
    private readonly size: () => number,
    private readonly maxAgeMs = NETNS_MAX_AGE_MS,
  ) {}

  /** How many are ready now. */
  get ready(): number {
    return this.entries.length;
  }

  /**
   * A descriptor of a netns no one has used, now the caller's to close; undefined when none is
   * ready (the caller makes one itself).
   */
  take(): number | undefined {
    if (this.closed) return undefined;
    const size = this.size();
    // Too old, or more than a lowered size keeps (the size is a live setting).
    const now = performance.now();
    for (let i = this.entries.length - 1; i >= 0; i--) {
      if (now - this.entries[i].madeAt > this.maxAgeMs || i >= size) fs.closeSync(this.entries.splice(i, 1)[0].fd);
    }
    const fd = size > 0 ? this.entries.shift()?.fd : undefined;
    // Topped up once the calls stop for a moment: making a netns holds kernel locks (rtnl among
    // them) that the pod's own attach, right after this call, needs (measured: made at once,
    // CreateNetwork got faster by what AttachInterface got slower).
    this.topUpTimer = rearm(this.topUpTimer, TOP_UP_AFTER_IDLE_MS, () => this.topUp(this.size()));
    // Once what it holds is too old to hand out, the pool lets it go, and its thread (≈ 10 MB).
    this.idleTimer = rearm(this.idleTimer, this.maxAgeMs, () => this.release());
    return fd;
  }

  close(): void {
    this.closed = true;
    this.release();
  }

  /** Closes what the pool holds and stops its thread; a later take starts again. */
  private release(): void {
    clearTimeout(this.topUpTimer);
    clearTimeout(this.idleTimer);
    this.topUpTimer = this.idleTimer = undefined;
    for (const e of this.entries.splice(0)) fs.closeSync(e.fd);
    // The thread finishes what it was making; what it posts after this is closed on arrival.
    this.worker?.postMessage({ stop: true } satisfies PoolRequest);
    this.worker = undefined;
    this.asked = 0;
  }

  private topUp(size: number): void {
    const want = size - this.entries.length - this.asked;
    if (this.closed || want <= 0 || performance.now() - this.failedAt < RETRY_MS) return;
    this.asked += want;
    log('debug', 'netns pool: making more ahead', { count: want, ready: this.entries.length });
    this.thread().postMessage({ make: want } satisfies PoolRequest);
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const w = startThread(path.join(__dirname, 'netns-pool-worker.js'));
    w.on('message', (m: PoolReply) => isLoadedMessage(m) || this.arrived(w, m));
    w.on('error', (e: Error) => this.gone(w, e.message));
    w.on('exit', (code) => this.gone(w, `exited with ${code}`));
    this.worker = w;
    return w;
  }

  private arrived(w: Worker, m: PoolReply): void {
    if ('error' in m) {
      this.failedAt = performance.now();
      if (w === this.worker) this.asked = 0;
      log('warn', 'netns pool: cannot make a network namespace ahead; CreateNetwork makes its own meanwhile', { error: m.error, retryInSeconds: RETRY_MS / 1000 });
      return;
    }
    if (this.closed || w !== this.worker) return fs.closeSync(m.fd);
    this.asked = Math.max(0, this.asked - 1);
    this.entries.push({ fd: m.fd, madeAt: performance.now() });
  }

  private gone(w: Worker, why: string): void {
    if (w !== this.worker) return;
    this.worker = undefined;
    this.asked = 0;
    if (!this.closed) log('warn', 'netns pool: its thread went away; the next CreateNetwork starts another', { why });
  }
}

/** A timer that fires ms after the last call (unref'd: it never keeps the daemon up). */
function rearm(t: NodeJS.Timeout | undefined, ms: number, fn: () => void): NodeJS.Timeout {
  if (t) return t.refresh();
  const n = setTimeout(fn, ms);
  n.unref();
  return n;
}
