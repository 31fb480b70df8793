// Host ports (CRI port mappings, the CNI portMappings capability, KNI POC and containerd's
// PodNetworkLifecycle): DNAT from the node's addresses to the pod, as the portmap plugin does.
// Level-triggered: the chains are rewritten whole from the records, so a crash, a missed
// release or a restart can leave nothing behind — the next write has only what records hold.
// Written only when a pod with port mappings comes or goes (and at node setup and reconcile
// when any rule exists): a pod without port mappings costs no iptables call.
import { Cidr, Family, familyOf } from '../ipam/ip';
import { deleteChain, deleteRule, ensureRule, restoreChains } from './iptables';

export const HOSTPORT_CHAIN = 'KNI-HOSTPORTS';
export const HOSTPORT_SNAT_CHAIN = 'KNI-HOSTPORTS-SNAT';

export interface PortMapping {
  protocol: 'tcp' | 'udp' | 'sctp';
  containerPort: number;
  hostPort: number;
  /** '' = every address of the node. */
  hostIp: string;
}

export interface HostPortTarget {
  sandbox: string;
  /** The pod's address of each family. */
  addresses: { family: Family; address: string }[];
  mappings: PortMapping[];
}

const JUMP_LOCAL = ['-m', 'addrtype', '--dst-type', 'LOCAL', '-m', 'comment', '--comment', 'kni:hostports', '-j', HOSTPORT_CHAIN];
const JUMP_SNAT = ['-m', 'comment', '--comment', 'kni:hostports-hairpin', '-j', HOSTPORT_SNAT_CHAIN];

/**
 * The DNAT and hairpin-SNAT rules of one family, for every target. `podRanges`: this node's pod
 * ranges of that family; only a pod's own connections through a host port are masqueraded
 * (its reply must come back through the node), a client elsewhere keeps its source address.
 */
export function hostPortRules(f: Family, targets: HostPortTarget[], podRanges: string[]): { dnat: string[][]; snat: string[][] } {
  const dnat: string[][] = [];
  const snat: string[][] = [];
  for (const t of targets) {
    const pod = t.addresses.find((a) => a.family === f)?.address;
    if (!pod) continue;
    for (const m of t.mappings) {
      if (m.hostIp && familyOf(m.hostIp) !== f) continue;
      dnat.push(hostPortDnat(f, t.sandbox, pod, m));
      for (const range of podRanges) snat.push(['-s', range, '-d', pod, '-p', m.protocol, '--dport', String(m.containerPort), '-m', 'conntrack', '--ctstate', 'DNAT', '-m', 'comment', '--comment', `kni:${t.sandbox}`, '-j', 'MASQUERADE']);
    }
  }
  return { dnat, snat };
}

/** The DNAT rule of one mapping of a sandbox's pod (at `pod`, of family f) in KNI-HOSTPORTS. */
export function hostPortDnat(f: Family, sandbox: string, pod: string, m: PortMapping): string[] {
  const to = f === 4 ? `${pod}:${m.containerPort}` : `[${pod}]:${m.containerPort}`;
  return [...(m.hostIp ? ['-d', m.hostIp] : []), '-p', m.protocol, '--dport', String(m.hostPort), '-m', 'comment', '--comment', `kni:${sandbox}`, '-j', 'DNAT', '--to-destination', to];
}

/** Makes the node's host-port rules exactly those of `targets`, for each family of `ranges`. */
export async function syncHostPorts(ranges: Cidr[], targets: HostPortTarget[]): Promise<void> {
  for (const f of [...new Set(ranges.map((c) => c.family))]) {
    const { dnat, snat } = hostPortRules(f, targets, ranges.filter((c) => c.family === f).map((c) => c.text));
    await restoreChains(f, 'nat', { [HOSTPORT_CHAIN]: dnat, [HOSTPORT_SNAT_CHAIN]: snat });
    await ensureRule(f, 'nat', 'PREROUTING', JUMP_LOCAL);
    await ensureRule(f, 'nat', 'OUTPUT', JUMP_LOCAL);
    await ensureRule(f, 'nat', 'POSTROUTING', JUMP_SNAT);
  }
}

/** Takes the jumps and both chains away (kni leaving the node). */
export async function removeHostPorts(ranges: Cidr[]): Promise<void> {
  for (const f of [...new Set(ranges.map((c) => c.family))]) {
    await deleteRule(f, 'nat', 'PREROUTING', JUMP_LOCAL);
    await deleteRule(f, 'nat', 'OUTPUT', JUMP_LOCAL);
    await deleteRule(f, 'nat', 'POSTROUTING', JUMP_SNAT);
    await deleteChain(f, 'nat', HOSTPORT_CHAIN);
    await deleteChain(f, 'nat', HOSTPORT_SNAT_CHAIN);
  }
}
