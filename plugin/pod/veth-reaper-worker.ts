// The reaper's thread: deletes the retired veths (one RTM_DELLINK naming their device group)
// when the main thread says some are waiting. It has its own netlink socket in the node netns
// and never changes netns. Nothing waits on it: a delete it missed is covered by its next one,
// by the main thread's flush at shutdown, or by reconcile.
import { parentPort } from 'node:worker_threads';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { groupDelete } from './veth-reaper';
import { threadLoaded } from '../sys/threads';

const sock = new NetlinkSocket();
parentPort!.on('message', () => {
  try {
    sock.request(groupDelete());
    parentPort!.postMessage({ ok: true });
  } catch (e) {
    if (e instanceof NetlinkError && e.code === 'ENODEV') return void parentPort!.postMessage({ ok: true });
    parentPort!.postMessage({ ok: false, error: (e as Error).message });
  }
});
threadLoaded();
