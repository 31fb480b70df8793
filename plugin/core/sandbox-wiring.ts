// A sandbox's interfaces in the kernel: made (veth pairs on the bridge, taps for vm sandboxes)
// and deleted, and kernel failures turned into the codes callers answer with.
import { KniError, invalid } from './errors';
import { log } from './log';
import type { NetworkRuntime } from './network-runtime';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { ifbName, removeIfb, shapePod } from '../pod/bandwidth';
import { NotANetnsError, socketInNetns } from '../netns/netns';
import { NetnsHandle, reopenRecordedNetns } from '../netns/open-netns';
import { withSpan } from '../observe/tracing';
import { HostVethExistsError, PodInterfaceExistsError, unwirePod, wirePod } from '../pod/pod-wiring';
import { unwireVmTap, wireVmTap } from '../pod/vm-wiring';
import { SandboxRecord } from '../store/records';

/** Makes the sandbox's interfaces in the netns open on ns: veths on the bridge, taps for vm sandboxes. */
export async function wireSandbox(rt: NetworkRuntime, rec: SandboxRecord, ns: NetnsHandle): Promise<void> {
  for (const itf of rec.interfaces) {
    try {
      wirePod(rt.host, rt.node.bridgeIndex, ns.fd, itf, rec.id);
    } catch (e) {
      if (!(e instanceof HostVethExistsError)) throw e;
      // A leftover of an earlier attach of this very sandbox (the name is its hash).
      log('warn', 'removing a stale host veth', { sandbox: rec.id, veth: e.hostVeth });
      unwirePod(itf);
      wirePod(rt.host, rt.node.bridgeIndex, ns.fd, itf, rec.id);
    }
  }
  if (rec.bandwidth) withSpan('bandwidth', {}, () => shapePod(rt.host, rec.id, rec.interfaces[0].hostVeth, rec.bandwidth!));
  const taps = rec.interfaces.filter((i) => i.tap);
  if (taps.length) {
    const pod = socketInNetns(ns.fd);
    try {
      for (const itf of taps) withSpan('vm.tap', { 'kni.tap': itf.tap! }, () => wireVmTap(pod, ns.fd, itf.name, itf.tap!));
    } finally {
      pod.close();
    }
  }
}

/** Deletes what wireSandbox made: taps, then the veths (the kernel removes the pod ends with them). */
export async function unwireSandbox(rec: SandboxRecord): Promise<void> {
  unwireTaps(rec);
  if (rec.bandwidth) {
    const sock = new NetlinkSocket();
    try {
      removeIfb(sock, ifbName(rec.id));
    } finally {
      sock.close();
    }
  }
  for (const itf of rec.interfaces) unwirePod(itf);
}

/** Deletes the taps of a vm sandbox, only in the netns it was wired in; one gone took them along. */
function unwireTaps(rec: SandboxRecord): void {
  const taps = rec.interfaces.filter((i) => i.tap);
  if (!taps.length) return;
  const ns = reopenRecordedNetns(rec.netnsPath, rec.netnsInode);
  if (ns.state !== 'same') return;
  try {
    const pod = socketInNetns(ns.handle.fd);
    try {
      for (const itf of taps) unwireVmTap(pod, itf.tap!);
    } finally {
      pod.close();
    }
  } catch (e) {
    if (!(e instanceof NotANetnsError)) throw e;
  } finally {
    ns.handle.close();
  }
}

/** A kernel or netns failure of a sandbox as the KniError its caller answers with. */
export function kernelError(e: unknown, rec: SandboxRecord): KniError {
  if (e instanceof KniError) return e;
  if (e instanceof NotANetnsError) return invalid(`netns path ${rec.netnsPath} is not a network namespace`);
  if (e instanceof PodInterfaceExistsError) return new KniError('ALREADY_EXISTS', `netns ${rec.netnsPath}: ${e.message}`);
  if ((e as NodeJS.ErrnoException).code === 'ENOENT') return new KniError('NOT_FOUND', `netns path ${rec.netnsPath} does not exist`);
  if (e instanceof NetlinkError) return new KniError('INTERNAL', `sandbox ${rec.id}: kernel refused to ${e.message}`);
  return new KniError('INTERNAL', `sandbox ${rec.id}: ${(e as Error).message ?? String(e)}`);
}
