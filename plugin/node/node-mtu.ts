// The pods' MTU when the config says "auto" (its default): the MTU of the link that holds the
// node's default route, as Calico's and flannel's auto-detection take it. A cloud network of
// 1460 (GCE) or 9001 (AWS) then needs no config; a fixed 1500 on a 1460 network loses large
// packets between nodes. With the vxlan backend everywhere, less the encapsulation.
import { Config } from '../core/config';
import { Family } from '../ipam/ip';
import { linkByIndex } from '../netlink/link';
import { routeList } from '../netlink/route';
import { NetlinkSocket } from '../netlink/socket';
import { vxlanOverhead } from './vxlan-device';

export const FALLBACK_MTU = 1500;

/** The pods' MTU and where it came from. */
export function podMtu(sock: NetlinkSocket, cfg: Config): { mtu: number; from: string } {
  if (cfg.mtu) return { mtu: cfg.mtu, from: 'the config' };
  for (const family of [4, 6] as Family[]) {
    const route = routeList(sock, family).find((r) => r.destination === 'default' && r.index);
    const link = route && linkByIndex(sock, route.index);
    if (!link?.mtu) continue;
    if (cfg.backend === 'vxlan') return { mtu: link.mtu - vxlanOverhead(family), from: `${link.name}, the link of the node's IPv${family} default route (${link.mtu}), less vxlan's ${vxlanOverhead(family)} bytes` };
    return { mtu: link.mtu, from: `${link.name}, the link of the node's IPv${family} default route` };
  }
  return { mtu: FALLBACK_MTU, from: 'no default route on this node: the Ethernet default' };
}
