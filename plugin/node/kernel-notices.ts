// What kni made on the node, deleted or set down by someone else, noticed as the kernel tells
// it: a pod's host veth (a cleanup script, an operator's `ip link del` or `ip link set … down`,
// which takes the pod's routes along even when the link comes up again), the bridge, a route to
// another node's pods (systemd-networkd dropping "foreign" routes when it restarts, a `ip route
// flush`).
// Without the notices each waits for the periodic check that finds it (reconcile: 60 s by
// default; peer routes: 10 s), and the pods behind it are cut off that long.
//
// The socket is read every POLL_MS on the main thread, without waiting: Node cannot watch a
// netlink socket in its event loop, and a thread blocked in recv(2) could not be stopped with
// kni (it would hold the process open). An empty read costs one syscall.
import { log } from '../core/log';
import { Notices, NoticeSocket } from '../netlink/notices';

const POLL_MS = 250;

export class KernelNotices {
  private sock?: NoticeSocket;
  private timer?: NodeJS.Timeout;
  private failed = false;
  private readonly listeners: ((n: Notices) => void)[] = [];

  /** Subscribes in the calling thread's netns (the node's). */
  start(): void {
    try {
      this.sock = new NoticeSocket();
    } catch (e) {
      log('warn', "the kernel's notices of deleted links and routes cannot be read: what others delete is repaired at the periodic checks only", { error: (e as Error).message });
      return;
    }
    this.timer = setInterval(() => this.poll(), POLL_MS);
    this.timer.unref();
  }

  /** Told of each batch of notices (links or routes deleted, links down, or notices lost). */
  onNotices(cb: (n: Notices) => void): void {
    this.listeners.push(cb);
  }

  private poll(): void {
    let n: Notices;
    try {
      n = this.sock!.drain();
    } catch (e) {
      if (!this.failed) log('warn', "the kernel's notices of deleted links and routes cannot be read", { error: (e as Error).message });
      this.failed = true;
      return;
    }
    this.failed = false;
    if (!n.linksDeleted.length && !n.linksDown.length && !n.routesDeleted.length && !n.lost) return;
    for (const cb of this.listeners) {
      try {
        cb(n);
      } catch (e) {
        log('error', 'kernel notice listener failed', { error: (e as Error).message });
      }
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.sock?.close();
    this.sock = undefined;
  }
}
