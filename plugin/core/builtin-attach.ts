// kni's built-in network for one sandbox: an address per pod range, the record on disk before
// any kernel work, the veth on the bridge (and a tap for vm sandboxes), host ports and bandwidth
// when asked, the extensions, then the commit mark. Any failure undoes what was done.
import { KniError } from './errors';
import type { NetworkRuntime } from './network-runtime';
import { ATTACHED, hostVethName } from './runtime-types';
import { kernelError, wireSandbox } from './sandbox-wiring';
import type * as validate from './validate';
import { NetnsHandle } from '../netns/open-netns';
import type { PortMapping } from '../node/host-ports';
import { withSpan } from '../observe/tracing';
import type { Bandwidth } from '../pod/bandwidth';
import { podMac } from '../pod/pod-wiring';
import { tapName } from '../pod/vm-wiring';
import { SandboxRecord } from '../store/records';

export interface BuiltInRequest {
  ips: ReturnType<typeof validate.requestedIps>;
  mac?: string;
  ports: PortMapping[];
  bandwidth?: Bandwidth;
}

export async function attachBuiltIn(
  rt: NetworkRuntime,
  id: string,
  ifName: string,
  ns: NetnsHandle,
  meta: Pick<SandboxRecord, 'pod' | 'labels' | 'annotations' | 'runtimeHandler' | 'kind' | 'entryPoint'>,
  requested: BuiltInRequest,
  ownedNetns: string,
): Promise<SandboxRecord> {
  for (const m of requested.ports) {
    const holder = [...rt.sandboxes.values()].find((r) => r.portMappings?.some((o) => o.hostPort === m.hostPort && o.protocol === m.protocol && (!o.hostIp || !m.hostIp || o.hostIp === m.hostIp)));
    if (holder) throw new KniError('ALREADY_EXISTS', `host port ${m.protocol}/${m.hostPort} is already mapped to sandbox ${holder.id}`);
  }
  let addresses;
  try {
    addresses = withSpan('ipam.allocate', {}, () => rt.ipam.allocate(id, requested.ips));
  } finally {
    rt.ipamChanged();
  }
  const rec: SandboxRecord = {
    id,
    phase: 'attaching',
    ...meta,
    netnsPath: ns.path,
    netnsInode: ns.inode,
    ownedNetns,
    interfaces: [{
      name: ifName,
      hostVeth: hostVethName(id, ifName),
      mac: requested.mac ?? podMac(addresses.find((a) => a.family === 4)?.address),
      mtu: rt.cfg.mtu,
      addresses,
      // The one extra step for VM sandboxes; without vmTap the netns is left as Kata scans it.
      ...(meta.kind === 'vm' && rt.cfg.vmTap ? { tap: tapName(0) } : {}),
    }],
    ...(requested.ports.length ? { portMappings: requested.ports } : {}),
    ...(requested.bandwidth ? { bandwidth: requested.bandwidth } : {}),
    createdAt: new Date().toISOString(),
  };
  try {
    withSpan('store.record', {}, () => rt.store.sandboxes.put(id, rec)); // the addresses are on disk before anyone sees them
  } catch (e) {
    rt.ipam.release(id, addresses);
    rt.ipamChanged();
    throw new KniError('UNAVAILABLE', `cannot record sandbox ${id} in the state dir: ${(e as Error).message}`);
  }
  rt.sandboxes.set(id, rec);
  try {
    await wireSandbox(rt, rec, ns);
    // Only a pod that asks for host ports costs an iptables call.
    if (rec.portMappings) await withSpan('hostports', {}, () => rt.node.syncHostPorts());
    await rt.callExtensions(rec);
  } catch (e) {
    await rt.rollback(rec);
    throw kernelError(e, rec);
  }
  try {
    // The record on disk keeps phase "attaching"; the mark says the kernel work is done.
    // The netns record is not rewritten: its owner is found from the sandbox records at start.
    withSpan('store.commit', {}, () => rt.store.sandboxes.mark(id, ATTACHED));
  } catch (e) {
    // Not committed means rolled back at the next start: undo it now, so no caller sees a
    // pod that a restart would take away.
    await rt.rollback(rec);
    throw new KniError('UNAVAILABLE', `cannot commit sandbox ${id} in the state dir (${(e as Error).message}); the attach was undone`);
  }
  rec.phase = 'attached';
  return rec;
}
