// The built-in network's interfaces in the kernel: made (veth pairs on the bridge, taps for vm
// sandboxes, bandwidth shaping) and deleted, and kernel failures turned into the codes callers
// answer with.
import { KniError, invalid } from './errors';
import { log } from './log';
import type { NodeLifecycle } from './node-lifecycle';
import { DetachMode, isBuiltIn } from './network-backend';
import { unwireTap, wireTap } from './vm-tap';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { ifbName, removeIfb, shapePod } from '../pod/bandwidth';
import { NotANetnsError } from '../netns/netns';
import { NetnsHandle } from '../netns/open-netns';
import { withSpan } from '../observe/tracing';
import { HostVethExistsError, PodInterfaceExistsError, unwirePod, wirePod } from '../pod/pod-wiring';
import { vacatePodEnd } from '../pod/pod-end-vacate';
import { VethBatchDelete } from '../pod/veth-batch-delete';
import { VethReaper } from '../pod/veth-reaper';
import { InterfaceRecord, SandboxRecord } from '../store/records';

/** What wiring uses of the runtime. */
export interface WiringParts {
  readonly host: NetlinkSocket;
  readonly node: Pick<NodeLifecycle, 'bridgeIndex' | 'ensure'>;
  readonly reaper: VethReaper;
}

/**
 * Makes one built-in interface in the netns open on ns: the veth on the bridge, its shaping
 * and tap.
 */
export async function wireInterface(rt: WiringParts, rec: SandboxRecord, itf: InterfaceRecord, ns: NetnsHandle): Promise<void> {
  const wire = () => wirePod(rt.host, rt.node.bridgeIndex, ns.fd, itf, rec.id);
  try {
    wire();
  } catch (e) {
    if (e instanceof NetlinkError && (await bridgeReplaced(rt))) {
      wire();
      return shape(rt, rec, itf, ns);
    }
    if (e instanceof PodInterfaceExistsError && rt.reaper.busy()) {
      // The pod end of a detach that answered already, whose veth the reaper has not deleted
      // yet (a runtime that reuses the netns at once): delete the retired veths now.
      rt.reaper.flush();
      wire();
      return shape(rt, rec, itf, ns);
    }
    if (!(e instanceof HostVethExistsError)) throw e;
    // A leftover of an earlier attach of this very sandbox (the name is its hash), or its own
    // retired veth from a detach a moment ago.
    log(rt.reaper.busy() ? 'debug' : 'warn', 'removing a stale host veth', { sandbox: rec.id, veth: e.hostVeth });
    unwirePod(itf);
    await wire();
  }
  shape(rt, rec, itf, ns);
}

/** After a kernel failure: whether the bridge was gone or replaced, and is now set up again. */
async function bridgeReplaced(rt: WiringParts): Promise<boolean> {
  const before = rt.node.bridgeIndex;
  await rt.node.ensure(true);
  return rt.node.bridgeIndex !== before;
}

/** What follows the veth on the main thread: bandwidth shaping and a vm sandbox's tap. */
function shape(rt: WiringParts, rec: SandboxRecord, itf: InterfaceRecord, ns: NetnsHandle): void {
  // The pod's limits apply to its default-network interface.
  if (rec.bandwidth && !itf.network) withSpan('bandwidth', {}, () => shapePod(rt.host, rec.id, itf.hostVeth, rec.bandwidth!));
  if (itf.tap) wireTap(itf, ns);
}

/**
 * Deletes what wireInterface made: the tap, the ifb, then the veth (the kernel removes the pod
 * end with it): through the reaper when the netns is ending (veth-reaper.ts), or when the pod
 * end could be set down and renamed first (pod-end-vacate.ts); else before answering (with
 * other detaches' veths when `deleters` are given: veth-batch-delete.ts); or not at all when
 * kni unpins the netns next (the teardown takes the pod side along).
 */
export async function unwireInterface(rec: SandboxRecord, itf: InterfaceRecord, mode: DetachMode = 'now', deleters?: { reaper: VethReaper; vethDelete: VethBatchDelete }): Promise<void> {
  if (itf.tap && mode === 'now') unwireTap(rec, itf.tap);
  if (rec.bandwidth && !itf.network) {
    const sock = new NetlinkSocket();
    try {
      removeIfb(sock, ifbName(rec.id));
    } finally {
      sock.close();
    }
  }
  if (mode === 'netns-goes') return;
  // The netns is ending: retire the veth and answer; the kernel's slow delete comes after,
  // batched. Otherwise the pod end must be out of the netns's way when the caller gets the
  // answer: set down and renamed (pod-end-vacate.ts), or else the veth deleted.
  if (mode === 'netns-ending' && deleters) deleters.reaper.retire(itf.hostVeth, rec.id);
  else if (deleters && withSpan('pod.vacate', {}, () => vacatePodEnd(rec, itf))) deleters.reaper.retire(itf.hostVeth, rec.id);
  else if (deleters) await deleters.vethDelete.delete(itf.hostVeth, rec.id);
  else unwirePod(itf);
}

/** Every built-in interface of a sandbox again (reconcile's repair, on the main thread). */
export async function wireSandbox(rt: WiringParts, rec: SandboxRecord, ns: NetnsHandle): Promise<void> {
  for (const itf of rec.interfaces.filter(isBuiltIn)) await wireInterface(rt, rec, itf, ns);
}

export async function unwireSandbox(rec: SandboxRecord): Promise<void> {
  for (const itf of rec.interfaces.filter(isBuiltIn)) await unwireInterface(rec, itf);
}

/** A kernel or netns failure of a sandbox as the KniError its caller answers with. */
export function kernelError(e: unknown, rec: SandboxRecord): KniError {
  if (e instanceof KniError) return e;
  if (e instanceof NotANetnsError) return invalid(`netns path ${rec.netnsPath} is not a network namespace`);
  if (e instanceof PodInterfaceExistsError) return new KniError('ALREADY_EXISTS', `netns ${rec.netnsPath}: ${e.message}`);
  if ((e as NodeJS.ErrnoException).code === 'ENOENT') return new KniError('NOT_FOUND', `netns path ${rec.netnsPath} does not exist`);
  // The kernel numbers a bridge's ports in 10 bits: 1023 pods at most on one node's bridge.
  if (e instanceof NetlinkError && e.code === 'EXFULL') return new KniError('RESOURCE_EXHAUSTED', `sandbox ${rec.id}: the node's bridge has no free port (a Linux bridge takes at most 1023; lower the kubelet's maxPods): kernel refused to ${e.message}`);
  if (e instanceof NetlinkError) return new KniError('INTERNAL', `sandbox ${rec.id}: kernel refused to ${e.message}`);
  return new KniError('INTERNAL', `sandbox ${rec.id}: ${(e as Error).message ?? String(e)}`);
}
