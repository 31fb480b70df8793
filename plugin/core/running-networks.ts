// Networks added to and removed from running sandboxes: kni's AttachNetwork / DetachNetwork, and
// the pod watcher when a running pod's networks annotation changes. Each goes through the same
// pipeline as an attach (attach-pipeline.ts addPlanned) under the sandbox's lock.
import { KniError, invalid } from './errors';
import { log } from './log';
import { addPlanned, PipelineParts } from './attach-pipeline';
import { assignDevices, DeviceParts } from './device-assignment';
import type { EventLog } from './events';
import type { KeyedMutex } from './keyed-mutex';
import { PlanParts, planSelection } from './network-plan';
import * as validate from './validate';
import { reopenRecordedNetns } from '../netns/open-netns';
import { withSpan } from '../observe/tracing';
import { NetworkSelection, parseNetworkSelections, SelectionError, SelectionFields } from '../networks/network-selection';
import { InterfaceRecord, SandboxRecord, SelectedBy } from '../store/records';

/** What adding and removing a running pod's networks uses of the runtime. */
export interface NetworkParts extends PipelineParts, PlanParts, DeviceParts {
  readonly locks: KeyedMutex;
  readonly events: EventLog;
  get(sandboxId: string): SandboxRecord;
}

/** One network for a running sandbox, as kni's API or the pod watcher asks for it (the rest checked as a Multus selection's). */
export interface NetworkRequest extends SelectionFields {
  /** "namespace/name", or "name" in the pod's namespace. */
  network: string;
  /** Default: the first free net<N>. */
  interface?: string;
}

/**
 * Adds one network to an attached sandbox (kni's AttachNetwork, or the pod's networks
 * annotation changed). The interface name defaults to the first free net<N>.
 */
export async function attachNetwork(rt: NetworkParts, sandboxId: string, selection: NetworkRequest, selectedBy: SelectedBy): Promise<InterfaceRecord> {
  const id = validate.sandboxId(sandboxId);
  return rt.locks.run(id, async () => {
    const rec = rt.get(id);
    const taken = new Set(rec.interfaces.map((i) => i.name));
    let ifName = selection.interface;
    if (!ifName) for (let n = 1; !ifName; n++) if (!taken.has(`net${n}`)) ifName = `net${n}`;
    const sel = parseSelection(rec, selection, ifName);
    if (taken.has(sel.interface)) throw new KniError('ALREADY_EXISTS', `sandbox ${id} already has an interface ${sel.interface}`);
    if (sel.defaultRoute?.length && rec.interfaces.some((i) => i.network && i.defaultRoute)) throw invalid(`sandbox ${id}: another network already has the default route`);
    const ns = reopenRecordedNetns(rec.netnsPath, rec.netnsInode);
    if (ns.state !== 'same') throw new KniError('FAILED_PRECONDITION', `sandbox ${id}: ${ns.reason}`);
    try {
      const planned = planSelection(rt, sel, selectedBy);
      if (planned.resourceName || planned.req.device) await assignDevices(rt, rec, [planned]);
      const itf = await withSpan('kni.attach_network', { 'kni.sandbox.id': id, 'kni.network': sel.name }, () => addPlanned(rt, rec, planned, ns.handle));
      rt.events.emit('interface_added', rec, `network ${itf.network} added`, [itf]);
      log('info', 'network added', { sandbox: id, network: itf.network, interface: itf.name, by: selectedBy });
      return itf;
    } finally {
      ns.handle.close();
    }
  });
}

/** One selection, checked as the annotation's are (the pod's namespace is the default). */
function parseSelection(rec: SandboxRecord, s: NetworkRequest, ifName: string): NetworkSelection {
  if (typeof s.network !== 'string' || !s.network) throw invalid('network must name a network (namespace/name or name)');
  const parts = s.network.split('/');
  if (parts.length > 2) throw invalid(`network ${JSON.stringify(s.network.slice(0, 80))} is not namespace/name or name`);
  const [namespace, name] = parts.length === 2 ? parts : [rec.pod.namespace || 'default', s.network];
  const el = {
    name, namespace, interface: ifName,
    ...(s.ips?.length ? { ips: s.ips } : {}), ...(s.mac ? { mac: s.mac } : {}), ...(s.defaultRoute?.length ? { 'default-route': s.defaultRoute } : {}), ...(s.cniArgs ? { 'cni-args': s.cniArgs } : {}),
    ...(s.portMappings !== undefined ? { portMappings: s.portMappings } : {}), ...(s.bandwidth !== undefined ? { bandwidth: s.bandwidth } : {}),
    ...(s.infinibandGuid ? { 'infiniband-guid': s.infinibandGuid } : {}), ...(s.deviceId ? { deviceID: s.deviceId } : {}),
  };
  try {
    return parseNetworkSelections(JSON.stringify([el]), namespace, rec.interfaces.find((i) => !i.network)?.name ?? 'eth0')[0];
  } catch (e) {
    if (e instanceof SelectionError) throw invalid(e.message);
    throw e;
  }
}

/** Removes a secondary network's interface from an attached sandbox; false when it has none of that name. */
export async function detachNetwork(rt: NetworkParts, sandboxId: string, ifName: string): Promise<boolean> {
  const id = validate.sandboxId(sandboxId);
  return rt.locks.run(id, async () => {
    const rec = rt.get(id);
    const itf = rec.interfaces.find((i) => i.name === ifName);
    if (!itf) return false;
    if (!itf.network) throw new KniError('FAILED_PRECONDITION', `${ifName} is the default network's interface of sandbox ${id}: detach the sandbox instead`);
    await withSpan('kni.detach_network', { 'kni.sandbox.id': id, 'kni.network': itf.network }, () => rt.removeInterface(rec, itf));
    log('info', 'network removed', { sandbox: id, network: itf.network, interface: ifName });
    return true;
  });
}
