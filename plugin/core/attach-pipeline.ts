// The attach pipeline, the same for every network: each interface's backend reserves what the
// record must hold, the record goes on disk before any kernel work, the backends wire their
// interfaces in order (the default network first), then host ports, a selection's default
// route, the extensions and last the commit (the record again, phase attached). Any failure undoes
// every interface.
// Interfaces added to a running sandbox (dynamic networks) go through the same steps, marked
// `adding` until they are done so that a crash part way is undone at the next start.
import { KniError } from './errors';
import { log } from './log';
import type { NodeLifecycle } from './node-lifecycle';
import type { Ipam } from '../ipam/ipam';
import type { StateStore } from '../store/state-store';
import { AttachmentRequest, isBuiltIn, NetworkBackend } from './network-backend';
import { ATTACHED } from './runtime-types';
import { kernelError } from './sandbox-wiring';
import { Family, parseIp } from '../ipam/ip';
import { linkByName } from '../netlink/link';
import { defaultRouteAdd } from '../netlink/route';
import { socketInNetns } from '../netns/netns';
import { NetnsHandle } from '../netns/open-netns';
import { withSpan } from '../observe/tracing';
import { InterfaceRecord, SandboxRecord } from '../store/records';

/** What the attach pipeline uses of the runtime. */
export interface PipelineParts {
  readonly store: StateStore;
  readonly sandboxes: Map<string, SandboxRecord>;
  readonly ipam: Ipam;
  readonly node: Pick<NodeLifecycle, 'syncHostPorts'>;
  ipamChanged(): void;
  callExtensions(rec: SandboxRecord): Promise<void>;
  rollback(rec: SandboxRecord): Promise<void>;
  removeInterface(rec: SandboxRecord, itf: InterfaceRecord): Promise<void>;
}

export interface PlannedInterface {
  backend: NetworkBackend;
  itf: InterfaceRecord;
  req: AttachmentRequest;
  /** Its definition's device plugin resource: a device of it is found before the wiring. */
  resourceName?: string;
}

/** A new interface record before its backend fills it in. */
export const blankInterface = (name: string, extra: Partial<InterfaceRecord> = {}): InterfaceRecord => ({ name, hostVeth: '', mac: '', mtu: 0, addresses: [], ...extra });

/** Releases what reserve() took for interfaces that never reached the record on disk. */
function unreserve(rt: PipelineParts, rec: SandboxRecord, itfs: InterfaceRecord[]): void {
  const addresses = itfs.filter(isBuiltIn).flatMap((i) => i.addresses);
  if (!addresses.length) return;
  rt.ipam.release(rec.id, addresses);
  rt.ipamChanged();
}

function reserveAll(rt: PipelineParts, rec: SandboxRecord, plan: PlannedInterface[]): void {
  const done: InterfaceRecord[] = [];
  try {
    for (const p of plan) {
      p.backend.reserve(rec, p.itf, p.req);
      done.push(p.itf);
    }
  } catch (e) {
    unreserve(rt, rec, done);
    throw e;
  }
}

/** Wires a new sandbox's planned interfaces and commits it; rec is 'attaching' with no interfaces yet. */
export async function attachPlanned(rt: PipelineParts, rec: SandboxRecord, plan: PlannedInterface[], ns: NetnsHandle): Promise<SandboxRecord> {
  // Named on the record first, as addPlanned's are: a reserve sees what those before it took (vm taps).
  rec.interfaces = plan.map((p) => p.itf);
  reserveAll(rt, rec, plan);
  try {
    withSpan('store.record', {}, () => rt.store.sandboxes.put(rec.id, rec)); // the addresses are on disk before anyone sees them
  } catch (e) {
    unreserve(rt, rec, rec.interfaces);
    throw new KniError('UNAVAILABLE', `cannot record sandbox ${rec.id} in the state dir: ${(e as Error).message}`);
  }
  rt.sandboxes.set(rec.id, rec);
  try {
    for (const p of plan) {
      await p.backend.attach(rec, p.itf, ns, p.req);
      // A CNI result is learnt only now: on disk before the next plugin runs.
      if (!isBuiltIn(p.itf)) rt.store.sandboxes.put(rec.id, rec);
    }
    // Only a pod that asks for host ports costs an iptables call.
    if (rec.portMappings) await withSpan('hostports', {}, () => rt.node.syncHostPorts());
    const routed = plan.find((p) => p.req.defaultRoute?.length);
    if (routed) takeDefaultRoute(rec, routed.itf, routed.req.defaultRoute!, ns);
    await rt.callExtensions(rec);
  } catch (e) {
    await rt.rollback(rec);
    throw kernelError(e, rec);
  }
  try {
    // The record again with phase "attached": the kernel work is done. The netns record is
    // not rewritten: its owner is found from the sandbox records at start.
    withSpan('store.commit', {}, () => rt.store.sandboxes.put(rec.id, { ...rec, phase: ATTACHED }));
  } catch (e) {
    // Not committed means rolled back at the next start: undo it now, so no caller sees a
    // pod that a restart would take away.
    await rt.rollback(rec);
    throw new KniError('UNAVAILABLE', `cannot commit sandbox ${rec.id} in the state dir (${(e as Error).message}); the attach was undone`);
  }
  rec.phase = 'attached';
  // A CNI network's addresses count in its IPAM status (host-local ranges) too.
  if (!rec.interfaces.every(isBuiltIn)) rt.ipamChanged();
  return rec;
}

/**
 * Adds one interface to an attached sandbox (its lock held). The record names it, marked
 * `adding`, before any kernel work; the flag goes when it is wired. A failure removes it again.
 */
export async function addPlanned(rt: PipelineParts, rec: SandboxRecord, p: PlannedInterface, ns: NetnsHandle): Promise<InterfaceRecord> {
  p.itf.adding = true;
  reserveAll(rt, rec, [p]);
  rec.interfaces.push(p.itf);
  const drop = () => {
    rec.interfaces = rec.interfaces.filter((i) => i !== p.itf);
  };
  try {
    rt.store.sandboxes.put(rec.id, rec);
  } catch (e) {
    drop();
    unreserve(rt, rec, [p.itf]);
    throw new KniError('UNAVAILABLE', `cannot record interface ${p.itf.name} of sandbox ${rec.id} in the state dir: ${(e as Error).message}`);
  }
  try {
    await p.backend.attach(rec, p.itf, ns, p.req);
    if (p.req.defaultRoute?.length) takeDefaultRoute(rec, p.itf, p.req.defaultRoute, ns);
    delete p.itf.adding;
    rt.store.sandboxes.put(rec.id, rec);
  } catch (e) {
    await rt.removeInterface(rec, p.itf).catch((err) => log('error', 'undoing a failed interface add failed; reconcile retries', { sandbox: rec.id, interface: p.itf.name, error: String(err) }));
    throw kernelError(e, rec);
  }
  return p.itf;
}

/** A selection's default-route: the pod's default route of each family goes through itf. */
function takeDefaultRoute(rec: SandboxRecord, itf: InterfaceRecord, gateways: string[], ns: NetnsHandle): void {
  const pod = socketInNetns(ns.fd);
  try {
    const link = linkByName(pod, itf.name);
    if (!link) throw new KniError('INTERNAL', `${itf.name} is missing in netns ${rec.netnsPath} after its network added it`);
    pod.exec(gateways.map((g) => {
      const ip = parseIp(g);
      return defaultRouteAdd(ip.family as Family, ip.value, link.index, itf.name);
    }));
  } finally {
    pod.close();
  }
  for (const other of rec.interfaces) {
    other.defaultRoute = other === itf;
    delete other.defaultGateways;
  }
  itf.defaultGateways = gateways;
}

/** After the interface with the pod's default route went away: the default network's is put back. */
export function restoreDefaultRoute(rec: SandboxRecord, ns: NetnsHandle): void {
  const itf = rec.interfaces.find((i) => !i.network);
  if (!itf) return;
  const pod = socketInNetns(ns.fd);
  try {
    const link = linkByName(pod, itf.name);
    if (!link) return;
    pod.exec(itf.addresses.filter((a) => a.gateway).map((a) => defaultRouteAdd(a.family as Family, parseIp(a.gateway).value, link.index, itf.name)));
  } finally {
    pod.close();
  }
  for (const i of rec.interfaces) {
    delete i.defaultRoute;
    delete i.defaultGateways;
  }
}
