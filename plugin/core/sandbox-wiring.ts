// The built-in network's interfaces in the kernel: made (veth pairs on the bridge, taps for vm
// sandboxes, bandwidth shaping) and deleted, and kernel failures turned into the codes callers
// answer with.
import { KniError, invalid } from './errors';
import { log } from './log';
import type { NetworkRuntime } from './network-runtime';
import { isBuiltIn } from './network-backend';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { ifbName, removeIfb, shapePod } from '../pod/bandwidth';
import { NotANetnsError, socketInNetns } from '../netns/netns';
import { NetnsHandle, reopenRecordedNetns } from '../netns/open-netns';
import { withSpan } from '../observe/tracing';
import { HostVethExistsError, PodInterfaceExistsError, unwirePod, wirePod } from '../pod/pod-wiring';
import { unwireVmTap, wireVmTap } from '../pod/vm-wiring';
import { VethReaper } from '../pod/veth-reaper';
import { InterfaceRecord, SandboxRecord } from '../store/records';

/** Makes one built-in interface in the netns open on ns: the veth on the bridge, its shaping and tap. */
export function wireInterface(rt: NetworkRuntime, rec: SandboxRecord, itf: InterfaceRecord, ns: NetnsHandle): void {
  try {
    wirePod(rt.host, rt.node.bridgeIndex, ns.fd, itf, rec.id);
  } catch (e) {
    if (!(e instanceof HostVethExistsError)) throw e;
    // A leftover of an earlier attach of this very sandbox (the name is its hash).
    log('warn', 'removing a stale host veth', { sandbox: rec.id, veth: e.hostVeth });
    unwirePod(itf);
    wirePod(rt.host, rt.node.bridgeIndex, ns.fd, itf, rec.id);
  }
  // The pod's limits apply to its default-network interface.
  if (rec.bandwidth && !itf.network) withSpan('bandwidth', {}, () => shapePod(rt.host, rec.id, itf.hostVeth, rec.bandwidth!));
  if (itf.tap) {
    const pod = socketInNetns(ns.fd);
    try {
      withSpan('vm.tap', { 'kni.tap': itf.tap }, () => wireVmTap(pod, ns.fd, itf.name, itf.tap!));
    } finally {
      pod.close();
    }
  }
}

/**
 * Deletes what wireInterface made: the tap, the ifb, then the veth (the kernel removes the pod
 * end with it): at once, or through the reaper (veth-reaper.ts). netnsGoes: the netns is
 * unpinned next and takes the pod side along.
 */
export function unwireInterface(rec: SandboxRecord, itf: InterfaceRecord, netnsGoes = false, reaper?: VethReaper): void {
  if (itf.tap && !netnsGoes) unwireTap(rec, itf.tap);
  if (rec.bandwidth && !itf.network) {
    const sock = new NetlinkSocket();
    try {
      removeIfb(sock, ifbName(rec.id));
    } finally {
      sock.close();
    }
  }
  if (netnsGoes) return;
  // A detach retires the veth and answers; the kernel's slow delete comes after, batched.
  if (reaper) reaper.retire(itf.hostVeth, rec.id);
  else unwirePod(itf);
}

/** Every built-in interface of a sandbox again (reconcile's repair). */
export function wireSandbox(rt: NetworkRuntime, rec: SandboxRecord, ns: NetnsHandle): void {
  for (const itf of rec.interfaces.filter(isBuiltIn)) wireInterface(rt, rec, itf, ns);
}

export function unwireSandbox(rec: SandboxRecord): void {
  for (const itf of rec.interfaces.filter(isBuiltIn)) unwireInterface(rec, itf);
}

/** Deletes a vm sandbox's tap, only in the netns it was wired in; one gone took it along. */
function unwireTap(rec: SandboxRecord, tap: string): void {
  const ns = reopenRecordedNetns(rec.netnsPath, rec.netnsInode);
  if (ns.state !== 'same') return;
  try {
    const pod = socketInNetns(ns.handle.fd);
    try {
      unwireVmTap(pod, tap);
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
