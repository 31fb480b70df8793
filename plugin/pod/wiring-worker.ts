// A wiring thread: makes one pod interface (wirePod: the veth on the bridge, the pod end's
// addresses and routes) per message, with netlink sockets of its own, so the main thread
// serves other calls while the kernel works. It enters a pod netns only inside wirePod's
// synchronous setns section and always comes back (or aborts the process), as the main
// thread does. Errors go back as plain data (errors.ts on the other side rebuilds them).
import { parentPort } from 'node:worker_threads';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { NotANetnsError } from '../netns/netns';
import { Errno } from '../sys/libc';
import { threadLoaded } from '../sys/threads';
import { InterfaceRecord } from '../store/records';
import { HostVethExistsError, PodInterfaceExistsError, wirePod } from './pod-wiring';

export interface WireJob {
  seq: number;
  netnsFd: number;
  bridgeIndex: number;
  itf: InterfaceRecord;
  sandboxId: string;
}

export type WireError =
  | { kind: 'host-veth-exists'; hostVeth: string }
  | { kind: 'pod-interface-exists'; ifName: string }
  | { kind: 'not-a-netns'; message: string }
  | { kind: 'netlink'; errno: number; what: string; kernelMessage: string }
  | { kind: 'errno'; call: string; errno: number }
  | { kind: 'other'; message: string };

export function wireErrorOf(e: unknown): WireError {
  if (e instanceof HostVethExistsError) return { kind: 'host-veth-exists', hostVeth: e.hostVeth };
  if (e instanceof PodInterfaceExistsError) return { kind: 'pod-interface-exists', ifName: e.ifName };
  if (e instanceof NotANetnsError) return { kind: 'not-a-netns', message: e.message };
  if (e instanceof NetlinkError) return { kind: 'netlink', errno: e.errno, what: e.what, kernelMessage: e.kernelMessage };
  if (e instanceof Errno) return { kind: 'errno', call: e.call, errno: e.errno };
  return { kind: 'other', message: (e as Error)?.message ?? String(e) };
}

if (parentPort) {
  const host = new NetlinkSocket();
  parentPort.on('message', (job: WireJob) => {
    try {
      wirePod(host, job.bridgeIndex, job.netnsFd, job.itf, job.sandboxId);
      parentPort!.postMessage({ seq: job.seq });
    } catch (e) {
      parentPort!.postMessage({ seq: job.seq, error: wireErrorOf(e) });
    }
  });
  threadLoaded();
}
