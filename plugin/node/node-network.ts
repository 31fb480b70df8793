// The node side of the reference network: the bridge with the gateway addresses, forwarding,
// and masquerading. Idempotent: run at start and by SetupNodeNetwork.
import fs from 'node:fs';
import { Config } from '../core/config';
import { KniError } from '../core/errors';
import { log } from '../core/log';
import { Ipam } from '../ipam/ipam';
import { Cidr, ipBytes } from '../ipam/ip';
import { addrAdd, addrList } from '../netlink/addr';
import { bridgeAdd, bridgeSetMulticastSnooping, IFF_UP, linkByIndex, linkByName, linkSetUp } from '../netlink/link';
import { routeList, RTPROT_RA } from '../netlink/route';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { forwardDrift, removeForwardRules, syncForwardRules } from './forward-rules';
import { keepSets, masqueradeDrift, removeMasquerade, syncMasquerade } from './masquerade';

/** A fixed, locally administered MAC keeps the bridge's MAC from changing as ports come and go. */
export function bridgeMac(ipam: Ipam): string {
  const gw4 = ipam.gateways().find((g) => g.family === 4);
  const tail = gw4 ? [...ipBytes(4, gw4.address)] : [0x0a, 0xf4, 0, 1];
  return ['0a', '58', ...tail.map((b) => b.toString(16).padStart(2, '0'))].join(':');
}

const FORWARDING = { 4: '/proc/sys/net/ipv4/ip_forward', 6: '/proc/sys/net/ipv6/conf/all/forwarding' } as const;
/**
 * Routed host ends answer NDP for the IPv6 gateway through proxy entries (plugin/pod/pod-wiring.ts),
 * which the kernel honours only with proxy_ndp on: set node-wide once here rather than per link
 * on each attach. It changes nothing on links without proxy entries.
 */
const PROXY_NDP = '/proc/sys/net/ipv6/conf/all/proxy_ndp';

/** `peerCidrs`: the other nodes' pod CIDRs, which pod traffic reaches unmasqueraded; `mtu`: the pods'. */
export async function setupNodeNetwork(sock: NetlinkSocket, cfg: Config, ipam: Ipam, peerCidrs: Cidr[], mtu: number): Promise<number> {
  let br = linkByName(sock, cfg.bridge);
  if (br && br.kind !== 'bridge') {
    throw new KniError('FAILED_PRECONDITION', `${cfg.bridge} exists and is a ${br.kind || 'non-bridge'} link, not a bridge`);
  }
  if (!br) {
    sock.request(bridgeAdd(cfg.bridge, mtu, bridgeMac(ipam), cfg.bridgeMulticastSnooping));
    br = linkByName(sock, cfg.bridge)!;
  } else {
    // A bridge made by an earlier kni, or by hand: the setting is the config's.
    sock.request(bridgeSetMulticastSnooping(cfg.bridge, cfg.bridgeMulticastSnooping));
    if (!(br.flags & IFF_UP)) sock.request(linkSetUp(cfg.bridge));
  }
  try {
    sock.exec(ipam.gateways().map((g) => addrAdd(br!.index, cfg.bridge, { family: g.family, value: g.address, prefixLength: g.prefixLength }, true)));
  } catch (e) {
    // A node booted with IPv6 off (disable_ipv6) and a dual-stack config: say what to change.
    if (e instanceof NetlinkError && e.code === 'EACCES' && cfg.ranges.some((c) => c.family === 6)) {
      throw new KniError('FAILED_PRECONDITION', `${e.message}; this node has IPv6 turned off (net.ipv6.conf.*.disable_ipv6): list only an IPv4 range in ranges, or turn IPv6 on`);
    }
    throw e;
  }
  fs.writeFileSync(FORWARDING[4], '1');
  if (cfg.ranges.some((c) => c.family === 6)) {
    keepRouterAdvertisements(sock);
    fs.writeFileSync(FORWARDING[6], '1');
    fs.writeFileSync(PROXY_NDP, '1');
  }
  if (cfg.masquerade) await syncMasquerade(cfg.ranges, keepSets(cfg, peerCidrs));
  else await removeMasquerade(cfg.ranges);
  if (cfg.allowPodForwarding) await syncForwardRules(cfg.ranges);
  else await removeForwardRules(cfg.ranges);
  return br.index;
}

/**
 * With IPv6 forwarding on, a link whose accept_ra is 1 stops taking router advertisements: a
 * node whose IPv6 default route comes from one (proto ra: SLAAC, some clouds) would lose it when
 * its lifetime ends. On each link holding such a route, accept_ra 1 becomes 2 (taken even when
 * forwarding: Documentation/networking/ip-sysctl.rst).
 */
function keepRouterAdvertisements(sock: NetlinkSocket): void {
  const links = new Set(routeList(sock, 6).filter((r) => r.destination === 'default' && r.protocol === RTPROT_RA && r.index).map((r) => r.index));
  for (const index of links) {
    const name = linkByIndex(sock, index)?.name;
    if (!name) continue;
    const file = `/proc/sys/net/ipv6/conf/${name}/accept_ra`;
    try {
      if (fs.readFileSync(file, 'utf8').trim() !== '1') continue;
      fs.writeFileSync(file, '2');
      log('info', `accept_ra of ${name} set to 2: its IPv6 default route comes from router advertisements, which IPv6 forwarding would stop it taking`, { link: name });
    } catch (e) {
      log('warn', `cannot keep ${name} taking router advertisements with IPv6 forwarding on; its IPv6 default route may expire`, { link: name, error: (e as Error).message });
    }
  }
}

/**
 * What of setupNodeNetwork's work on an existing bridge is undone now: other agents and admins
 * change the node behind kni's back (a sysctl run or another network agent turning forwarding
 * off, a firewall reload flushing nat, `ip addr flush`), and pods lose their gateway or the
 * outside world without a word. One address dump, up to three sysctl reads, and (masquerading,
 * accepting forwarded traffic) a few iptables processes: reconcile's, never a pod's.
 */
export async function nodeNetworkDrift(sock: NetlinkSocket, cfg: Config, ipam: Ipam, bridgeIndex: number, peerCidrs: Cidr[]): Promise<string[]> {
  const out: string[] = [];
  const on = new Set(addrList(sock).filter((a) => a.index === bridgeIndex).map((a) => `${a.address}/${a.prefixLength}`));
  for (const g of ipam.gateways()) if (!on.has(`${g.text}/${g.prefixLength}`)) out.push(`gateway ${g.text}/${g.prefixLength} is missing from ${cfg.bridge}`);
  for (const f of [...new Set(cfg.ranges.map((c) => c.family))]) {
    for (const file of f === 6 ? [FORWARDING[6], PROXY_NDP] : [FORWARDING[4]]) {
      if (fs.readFileSync(file, 'utf8').trim() !== '1') out.push(`${file.slice('/proc/sys/'.length).replace(/\//g, '.')} is off`);
    }
  }
  if (cfg.masquerade) out.push(...(await masqueradeDrift(cfg.ranges, keepSets(cfg, peerCidrs))));
  if (cfg.allowPodForwarding) out.push(...(await forwardDrift(cfg.ranges)));
  return out;
}
