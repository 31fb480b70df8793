// A pod's network as kni's API answers it (GetPod, ListPods, AttachNetwork, Watch).
import { carriesDefaultRoute } from '../core/network-backend';
import { podRoutes } from '../core/sandbox-check';
import { gatewayNeighbours } from '../pod/pod-wiring';
import { InterfaceRecord, SandboxRecord } from '../store/records';

/** An address family as the API's enum names it. */
export const family = (f: number): string => (f === 4 ? 'IPV4' : 'IPV6');

/** An interface as kni's API answers it (GetPod, ListPods, Watch). */
export function interfaceMessage(i: InterfaceRecord): Record<string, unknown> {
  return {
    name: i.name,
    mac: i.mac,
    mtu: i.mtu,
    host_interface: i.hostVeth,
    vm_tap: i.tap ?? '',
    network: i.network ?? '',
    default: carriesDefaultRoute(i),
    selected_by: i.selectedBy ?? '',
    default_network: i.defaultNetwork ?? '',
    device_id: i.deviceId ?? '',
    ...(i.dns ? { dns: i.dns } : {}),
    addresses: i.addresses.map((a) => ({ address: a.address, prefix_length: a.prefixLength, family: family(a.family), gateway: a.gateway, range: a.range })),
    neighbors: gatewayNeighbours(i),
  };
}

export function podNetwork(rec: SandboxRecord): Record<string, unknown> {
  return {
    sandbox_id: rec.id,
    pod: rec.pod,
    netns_path: rec.netnsPath,
    interfaces: rec.interfaces.filter((i) => !i.adding && !i.removing).map(interfaceMessage),
    routes: podRoutes(rec),
    runtime_handler: rec.runtimeHandler,
    kind: rec.kind ?? 'container',
    created_at: rec.createdAt,
    labels: rec.labels,
    annotations: rec.annotations,
  };
}
