// Host veths of detached pods, deleted after the detach has answered, many in one request.
//
// Deleting a veth costs the kernel ≈ 20 ms (an RCU grace period in unregister_netdevice),
// inside the send: on kni's main thread a detach waited for it, and 16 detaches at once
// queued behind each other's. Now a detach only retires its veth — one request that sets the
// alias to "kni-released:<id>" and moves the link to REAP_GROUP — and answers (a detach whose
// caller keeps the netns first sets the pod end down and renamed: pod-end-vacate.ts). A worker thread
// (veth-reaper-worker.ts) then deletes every retired veth with one RTM_DELLINK naming the
// group: the kernel unregisters them together, with a single grace period, and the main thread
// never blocks on it. The worker is only told that something waits; it answers nothing anyone
// waits on (the earlier off-thread veth delete lost a completion now and then: see
// docs/performance.md), so a lost message costs a later delete, never a hung detach.
//
// Nothing leaks: a retired veth is no sandbox's any more (its record is gone before the
// answer), so a crash before the batch runs leaves links that a restart's rebuild does not
// take for pods (the alias no longer starts with "kni:") and that reconcile deletes as strays.
// The pod end keeps its addresses until then, on a netns the runtime is tearing down; kni's
// allocator does not hand an address out again at once.
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import { log } from '../core/log';
import { linkGroupDel, linkSetGroup } from '../netlink/link';
import { NetlinkError, NetlinkRequest, NetlinkSocket } from '../netlink/socket';
import { isLoadedMessage, startThread, stopThread } from '../sys/threads';

/** The device group retired veths wait in ("kni" in ASCII); group 0 is every link's default. */
export const REAP_GROUP = 0x6b6e69;
export const RELEASED_ALIAS_PREFIX = 'kni-released:';
/** How long retired veths wait for company before the batch delete. */
const BATCH_MS = 2;

export const groupDelete = (): NetlinkRequest => linkGroupDel(REAP_GROUP, 'the retired veths');

export class VethReaper {
  private timer?: NodeJS.Timeout;
  private waiting = 0;
  private deleted = 0;
  private sock?: NetlinkSocket;
  private worker?: Worker;
  private workerBusy = false;

  private socket(): NetlinkSocket {
    this.sock ??= new NetlinkSocket();
    return this.sock;
  }

  /**
   * Takes a host veth out of service now, in one request (the caller holds its sandbox's lock,
   * so the name is that sandbox's), and deletes it with the next batch. Already gone is fine.
   */
  retire(hostVeth: string, sandboxId: string): void {
    try {
      this.socket().request(linkSetGroup(hostVeth, REAP_GROUP, `${RELEASED_ALIAS_PREFIX}${sandboxId}`));
    } catch (e) {
      if (e instanceof NetlinkError && e.code === 'ENODEV') return;
      throw e;
    }
    this.waiting++;
    this.timer ??= setTimeout(() => this.kick(), BATCH_MS);
  }

  /** Hands the batch to the worker (one in flight; what comes meanwhile goes with the next). */
  private kick(): void {
    this.timer = undefined;
    if (!this.waiting) return;
    if (this.workerBusy) {
      this.timer = setTimeout(() => this.kick(), BATCH_MS);
      return;
    }
    const n = this.waiting;
    this.waiting = 0;
    this.workerBusy = true;
    this.spawnWorker().postMessage(n);
    this.inFlight = n;
  }

  private inFlight = 0;

  private spawnWorker(): Worker {
    if (this.worker) return this.worker;
    const w = startThread(path.join(__dirname, 'veth-reaper-worker.js'));
    w.on('message', (m: { ok: boolean; error?: string }) => {
      if (isLoadedMessage(m)) return;
      this.workerBusy = false;
      if (m.ok) this.deleted += this.inFlight;
      else log('error', 'cannot delete the retired veths; reconcile deletes them', { error: m.error });
      this.inFlight = 0;
    });
    w.on('error', (e: Error) => {
      log('error', 'the veth reaper thread failed; retired veths are deleted by the main thread', { error: e.message });
      this.worker = undefined;
      this.workerBusy = false;
      this.waiting += this.inFlight;
      this.inFlight = 0;
      this.flush();
    });
    this.worker = w;
    return w;
  }

  /** Deletes every retired veth now, on this thread (shutdown, or the worker failed). */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.waiting = 0;
    try {
      this.socket().request(groupDelete());
    } catch (e) {
      // ENODEV: nothing in the group any more (deleted meanwhile, or by a restart's reconcile).
      if (!(e instanceof NetlinkError && e.code === 'ENODEV')) throw e;
    }
  }

  /** Whether retired veths may still be there (waiting, or handed to the thread). */
  busy(): boolean {
    return this.waiting + this.inFlight > 0;
  }

  /** Retired veths not handed to the kernel's delete yet, and deleted so far (metrics, tests). */
  stats(): { waiting: number; deleted: number } {
    return { waiting: this.waiting + this.inFlight, deleted: this.deleted };
  }

  close(): void {
    try {
      this.flush();
    } finally {
      if (this.worker) stopThread(this.worker);
      this.worker = undefined;
      this.sock?.close();
      this.sock = undefined;
    }
  }
}
