// What kni made on its node beside the pods, taken away when kni leaves a node that has no pod
// on its network left: the routes to other nodes' pods (RTPROT_KNI) and the vxlan device, the
// bridge with the gateways, and the iptables chains and the rules jumping to them. Left behind,
// they would stand in the next network's way: its bridge would hold the same gateway address
// as kni's (the node's route to the pod range would still lead to kni's), its vxlan device
// could not bind the port kni's holds, and its routes to the peers would collide with kni's.
// Forwarding and accept_ra stay as they are: the next network needs them too.
import type { Config } from '../core/config';
import { Cidr, Family, parseCidr } from '../ipam/ip';
import { linkByName, linkDel, linkList } from '../netlink/link';
import { peerRouteDel, routeList, RTPROT_KNI } from '../netlink/route';
import { NetlinkSocket } from '../netlink/socket';
import { kniIfbs } from '../pod/bandwidth';
import { VETH_ALIAS_PREFIX } from '../pod/pod-wiring';
import { removeForwardRules } from './forward-rules';
import { removeHostPorts } from './host-ports';
import { removeMasquerade } from './masquerade';
import { NodeGuards } from './node-guards';
import { removeVxlanDevice } from './vxlan-device';
import { nftApply } from './iptables';
import { policyTableInKernel, removePolicyTableScript } from '../policy/policy-ruleset';

/** The host ends of pods' links that carry kni's marks (a veth's alias, an ifb): pods still on kni's network. */
export function kniPodLinks(sock: NetlinkSocket): string[] {
  return [...linkList(sock).filter((l) => l.alias.startsWith(VETH_ALIAS_PREFIX) && l.kind === 'veth').map((l) => l.name), ...kniIfbs(sock).map((i) => i.name)];
}

/**
 * Removes kni's node network; `ranges` are the node's pod ranges (the masquerade rules name
 * them). Each part is tried whatever became of the others: what was removed, and what could not be.
 */
export async function removeNodeNetwork(sock: NetlinkSocket, cfg: Config, ranges: Cidr[]): Promise<{ removed: string[]; failed: string[] }> {
  const removed: string[] = [];
  const failed: string[] = [];
  const attempt = async (what: string, f: () => unknown): Promise<void> => {
    try {
      if ((await f()) !== false) removed.push(what);
    } catch (e) {
      failed.push(`${what}: ${(e as Error).message}`);
    }
  };
  for (const family of [4, 6] as Family[]) {
    for (const r of routeList(sock, family).filter((x) => x.protocol === RTPROT_KNI && x.destination.includes('/'))) {
      await attempt(`route to ${r.destination}`, () => sock.request(peerRouteDel(parseCidr(r.destination))));
    }
  }
  await attempt(`vxlan device ${cfg.vxlan.device}`, () => removeVxlanDevice(sock, cfg.vxlan.device));
  await attempt(`bridge ${cfg.bridge}`, () => {
    const br = linkByName(sock, cfg.bridge);
    if (!br || br.kind !== 'bridge') return false;
    // A bridge someone else's links joined is not only kni's: it stays.
    const ports = linkList(sock).filter((l) => l.master === br.index);
    if (ports.length) throw new Error(`it still has ports (${ports.map((l) => l.name).join(', ')})`);
    sock.request(linkDel(cfg.bridge, br.index));
    return true;
  });
  if (ranges.length) {
    await attempt('masquerade table', () => removeMasquerade(ranges));
    await attempt('forwarding rules', () => removeForwardRules(ranges));
    await attempt('host port rules', () => removeHostPorts(ranges));
  }
  await attempt("kni's nftables tables", () => new NodeGuards().removeTables());
  await attempt('the network policy table', async () => {
    if (!policyTableInKernel()) return false;
    await nftApply(removePolicyTableScript(), 'the network policy table');
    return true;
  });
  return { removed, failed };
}
