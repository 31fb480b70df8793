// Whether this node's service proxy has taken up a ClusterIP (Trace): kube-proxy in IPVS mode puts
// every ClusterIP on its kube-ipvs0 dummy link; in iptables mode it writes one rule per ClusterIP
// and port into the nat table's KUBE-SERVICES chain (a Service without endpoints gets a REJECT in
// the filter table instead, so only ask with endpoints). Other proxies (kube-proxy's nftables
// mode, eBPF replacements) leave neither; then nothing is said of them.
import { Family, parseIp } from '../ipam/ip';
import { addrList } from '../netlink/addr';
import { linkByName } from '../netlink/link';
import type { NetlinkSocket } from '../netlink/socket';
import { chainRules } from './iptables';

export interface ProxyRule {
  /** '' when neither kube-proxy mode's traces are on this node. */
  mode: 'ipvs' | 'iptables' | '';
  programmed: boolean;
}

export async function serviceProxyRule(host: NetlinkSocket, family: Family, value: bigint, text: string): Promise<ProxyRule> {
  const ipvs = linkByName(host, 'kube-ipvs0');
  if (ipvs) return { mode: 'ipvs', programmed: addrList(host).some((a) => a.index === ipvs.index && a.family === family && a.address === text) };
  const rules = await chainRules(family, 'nat', 'KUBE-SERVICES').catch(() => undefined);
  if (!rules) return { mode: '', programmed: false };
  return { mode: 'iptables', programmed: rules.some((r) => destinationOf(r) === value) };
}

/** The single address a rule's `-d` matches (iptables -S prints `-d 10.96.0.10/32`), by value: the tools' IPv6 text is not ours. */
function destinationOf(rule: string): bigint | undefined {
  const m = /(?:^| )-d (\S+?)\/(32|128)(?: |$)/.exec(rule);
  if (!m) return undefined;
  try {
    return parseIp(m[1]).value;
  } catch {
    return undefined;
  }
}
