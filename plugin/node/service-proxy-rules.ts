// Whether this node's service proxy has taken up a ClusterIP (Trace), for each of kube-proxy's
// modes on Linux: IPVS puts every ClusterIP on its kube-ipvs0 dummy link; nftables keeps one
// element per ClusterIP and port in the map service-ips of its tables `ip kube-proxy` and
// `ip6 kube-proxy`; iptables writes one rule per ClusterIP and port into the nat table's
// KUBE-SERVICES chain. A Service without endpoints is rejected elsewhere in each mode, so only
// ask with endpoints. Other proxies (eBPF replacements) leave none of these: nothing is said of them.
import { Family, isSameIp } from '../ipam/ip';
import { addrList } from '../netlink/addr';
import { linkByName } from '../netlink/link';
import type { NetlinkSocket } from '../netlink/socket';
import { chainRules, nftMapJson } from './iptables';

/** The dummy link kube-proxy's IPVS mode puts every ClusterIP on. */
export const IPVS_LINK = 'kube-ipvs0';

export interface ProxyRule {
  /** '' when none of kube-proxy's modes has left its traces on this node. */
  mode: 'ipvs' | 'nftables' | 'iptables' | '';
  programmed: boolean;
}

export async function serviceProxyRule(host: NetlinkSocket, family: Family, value: bigint, text: string): Promise<ProxyRule> {
  const ipvs = linkByName(host, IPVS_LINK);
  if (ipvs) return { mode: 'ipvs', programmed: addrList(host).some((a) => a.index === ipvs.index && a.family === family && a.address === text) };
  const nft = await nftServiceIps(family);
  if (nft) return { mode: 'nftables', programmed: nft.some((a) => isSameIp(a, { family, value })) };
  const rules = await chainRules(family, 'nat', 'KUBE-SERVICES').catch(() => undefined);
  if (!rules) return { mode: '', programmed: false };
  return { mode: 'iptables', programmed: rules.some((r) => isSameIp(destinationOf(r), { family, value })) };
}

/** The addresses keyed in kube-proxy's service-ips map of that family, as nft prints them; undefined: no such map (or no nft here). */
async function nftServiceIps(family: Family): Promise<string[] | undefined> {
  const listed = await nftMapJson(family === 4 ? 'ip' : 'ip6', 'kube-proxy', 'service-ips');
  if (listed === undefined) return undefined;
  const out: string[] = [];
  // Each element a [key, verdict] pair, its key {"concat": [address, protocol, port]};
  // elements with a comment are {"elem": {"val": key, …}}.
  const visit = (x: unknown): void => {
    if (Array.isArray(x)) x.forEach(visit);
    else if (x && typeof x === 'object') {
      const concat = (x as { concat?: unknown }).concat;
      if (Array.isArray(concat) && typeof concat[0] === 'string') out.push(concat[0]);
      else Object.values(x).forEach(visit);
    }
  };
  visit(listed);
  return out;
}

/** The single address a rule's `-d` matches, as iptables -S prints it (`-d 10.96.0.10/32`); compared by value: the tools' IPv6 text is not ours. */
const destinationOf = (rule: string): string => /(?:^| )-d (\S+?)\/(32|128)(?: |$)/.exec(rule)?.[1] ?? '';
