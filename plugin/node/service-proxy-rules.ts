// Whether this node's service proxy has taken up a ClusterIP (Trace), for each of kube-proxy's
// modes on Linux: IPVS puts every ClusterIP on its kube-ipvs0 dummy link; nftables keeps one
// element per ClusterIP and port in the map service-ips of its tables `ip kube-proxy` and
// `ip6 kube-proxy`; iptables writes one rule per ClusterIP and port into the nat table's
// KUBE-SERVICES chain. A Service without endpoints is rejected elsewhere in each mode, so only
// ask with endpoints. Other proxies (eBPF replacements) leave none of these: nothing is said of them.
// A NodePort: iptables mode's rule for its port in KUBE-NODEPORTS (taken on every local address
// by default); nftables mode's element in service-nodeports, on the addresses of its nodeport-ips
// set; IPVS mode's virtual servers are not read (that needs ipvsadm).
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
  /** What is missing, when it is not programmed ("no rule in the nat table's KUBE-SERVICES chain"). */
  missing: string;
  /** The mode's rules were not read (a NodePort in IPVS mode). */
  unread?: boolean;
}

export async function serviceProxyRule(host: NetlinkSocket, family: Family, value: bigint, text: string): Promise<ProxyRule> {
  const ipvs = linkByName(host, IPVS_LINK);
  if (ipvs) return { mode: 'ipvs', programmed: addrList(host).some((a) => a.index === ipvs.index && a.family === family && a.address === text), missing: 'no address on kube-ipvs0' };
  const nft = await nftKeys(family, 'service-ips');
  if (nft) return { mode: 'nftables', programmed: nft.some((k) => typeof k[0] === 'string' && isSameIp(k[0], { family, value })), missing: 'no element in its service-ips map' };
  const rules = await chainRules(family, 'nat', 'KUBE-SERVICES').catch(() => undefined);
  if (!rules) return { mode: '', programmed: false, missing: '' };
  return { mode: 'iptables', programmed: rules.some((r) => isSameIp(destinationOf(r), { family, value })), missing: "no rule in the nat table's KUBE-SERVICES chain" };
}

/** Whether this node's kube-proxy takes NodePort `port` (protocol TCP, UDP or SCTP) on address `text`. */
export async function nodePortProxyRule(host: NetlinkSocket, family: Family, value: bigint, port: number, protocol: string): Promise<ProxyRule> {
  if (linkByName(host, IPVS_LINK)) return { mode: 'ipvs', programmed: true, missing: '', unread: true };
  const proto = protocol.toLowerCase();
  const nft = await nftKeys(family, 'service-nodeports');
  if (nft) {
    if (!nft.some((k) => k[0] === proto && Number(k[1]) === port)) return { mode: 'nftables', programmed: false, missing: 'no element in its service-nodeports map' };
    const addresses = await nftKeys(family, 'nodeport-ips', 'set');
    const taken = !addresses || addresses.some((k) => typeof k[0] === 'string' && isSameIp(k[0], { family, value }));
    return { mode: 'nftables', programmed: taken, missing: 'this address is not in its nodeport-ips set (kube-proxy takes NodePorts on its nodePortAddresses only)' };
  }
  const rules = await chainRules(family, 'nat', 'KUBE-NODEPORTS').catch(() => undefined);
  if (!rules) return { mode: '', programmed: false, missing: '' };
  const dport = new RegExp(`(?:^| )-p ${proto} .*--dport ${port}(?: |$)`);
  return { mode: 'iptables', programmed: rules.some((r) => dport.test(r)), missing: "no rule in the nat table's KUBE-NODEPORTS chain" };
}

/**
 * The keys of one of kube-proxy's nftables maps (or sets) of that family, each as its parts
 * ([address, protocol, port] for service-ips, [protocol, port] for service-nodeports, [address]
 * for a set of addresses); undefined: no such map (or no nft here).
 */
async function nftKeys(family: Family, name: string, kind: 'map' | 'set' = 'map'): Promise<unknown[][] | undefined> {
  const listed = await nftMapJson(family === 4 ? 'ip' : 'ip6', 'kube-proxy', name, kind);
  if (listed === undefined) return undefined;
  const out: unknown[][] = [];
  // A map's elements are [key, verdict] pairs, a composite key {"concat": [...]}, an element with
  // a comment {"elem": {"val": key, …}}; a set's elements are plain values.
  const elements = (x: unknown): unknown[] => {
    if (Array.isArray(x)) return x.flatMap(elements);
    if (x && typeof x === 'object') {
      const o = x as Record<string, unknown>;
      if (o.elem !== undefined && !Array.isArray(o.elem)) return [(o.elem as { val?: unknown }).val];
      if (kind === 'set' ? o.set : o.map) return ((o[kind] as { elem?: unknown[] }).elem ?? []) as unknown[];
      return Object.values(o).flatMap(elements);
    }
    return [];
  };
  for (const e of elements(listed)) {
    const key = kind === 'map' && Array.isArray(e) ? e[0] : e;
    const keyed = key && typeof key === 'object' && 'elem' in key ? (key as { elem: { val: unknown } }).elem.val : key;
    const concat = keyed && typeof keyed === 'object' ? (keyed as { concat?: unknown[] }).concat : undefined;
    out.push(Array.isArray(concat) ? concat : [keyed]);
  }
  return out;
}

/** The single address a rule's `-d` matches, as iptables -S prints it (`-d 10.96.0.10/32`); compared by value: the tools' IPv6 text is not ours. */
const destinationOf = (rule: string): string => /(?:^| )-d (\S+?)\/(32|128)(?: |$)/.exec(rule)?.[1] ?? '';
