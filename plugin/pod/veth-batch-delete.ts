// Host veths deleted before the detach answers, several at once: a detach whose caller may keep
// the netns (a plain Detach, a CNI DEL that names no pod sandbox, a secondary interface
// removed) when its pod end could not be set down and renamed first (pod-end-vacate.ts: not
// where kni left it, or an error).
//
// The kernel's veth delete costs ≈ 20 ms, most of it one RCU grace period, inside the send; it
// runs on the main thread, which waits. Deleted one by one, 8 detaches at once took 8 of them,
// each behind the last. Here each detach moves its veth to DELETE_GROUP (one cheap request,
// alias "kni-released:<id>") and waits; once the requests already read have all done so
// (setImmediate: after the event loop's poll), one RTM_DELLINK of the group deletes them
// together, with one grace period, and every waiting detach answers. A crash in between
// leaves links whose alias no longer starts with "kni:": reconcile deletes them as strays.
import { log, logMs } from '../core/log';
import { linkGroupDel, linkSetGroup } from '../netlink/link';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { RELEASED_ALIAS_PREFIX, REAP_GROUP } from './veth-reaper';

/** Apart from the reaper's group: its thread must not race this one for the same links. */
export const DELETE_GROUP = REAP_GROUP + 1;

interface Waiter {
  resolve(): void;
  reject(e: unknown): void;
}

export class VethBatchDelete {
  private waiting: Waiter[] = [];
  private scheduled = false;
  private sock?: NetlinkSocket;

  private socket(): NetlinkSocket {
    this.sock ??= new NetlinkSocket();
    return this.sock;
  }

  /** Resolves once the host veth (and with it the pod end) is gone; already gone is fine. */
  delete(hostVeth: string, sandboxId: string): Promise<void> {
    try {
      this.socket().request(linkSetGroup(hostVeth, DELETE_GROUP, `${RELEASED_ALIAS_PREFIX}${sandboxId}`));
    } catch (e) {
      if (e instanceof NetlinkError && e.code === 'ENODEV') return Promise.resolve();
      return Promise.reject(e);
    }
    return new Promise<void>((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      if (this.scheduled) return;
      this.scheduled = true;
      setImmediate(() => this.run());
    });
  }

  private run(): void {
    this.scheduled = false;
    const batch = this.waiting;
    this.waiting = [];
    let failure: unknown;
    const started = performance.now();
    try {
      this.socket().request(linkGroupDel(DELETE_GROUP, `${batch.length} host veth(s)`));
    } catch (e) {
      // ENODEV: none left in the group (a reconcile or a restart deleted them meanwhile).
      if (!(e instanceof NetlinkError && e.code === 'ENODEV')) failure = e;
    }
    log('debug', 'host veths deleted together', { count: batch.length, ms: logMs(performance.now() - started) });
    for (const w of batch) {
      if (failure) w.reject(failure);
      else w.resolve();
    }
  }

  close(): void {
    this.sock?.close();
    this.sock = undefined;
  }
}
