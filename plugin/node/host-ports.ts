// Host ports (CRI port mappings, the CNI portMappings capability, KNI POC and containerd's
// PodNetworkLifecycle): DNAT from the node's addresses to the pod, as the portmap plugin does.
// Level-triggered: the chains are rewritten whole from the records, so a crash, a missed
// release or a restart can leave nothing behind — the next write has only what records hold.
// Written only when a pod with port mappings comes or goes (and at node setup and reconcile
// when any rule exists): a pod without port mappings costs no iptables call.
import fs from 'node:fs';
import { Cidr, Family, familyOf, formatIp } from '../ipam/ip';
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
  /** A routed pod's host end (a bridged pod is reached through the bridge). */
  hostVeth?: string;
}

const LOOPBACK4 = '127.0.0.0/8';

const JUMP_LOCAL = ['-m', 'addrtype', '--dst-type', 'LOCAL', '-m', 'comment', '--comment', 'kni:hostports', '-j', HOSTPORT_CHAIN];
const JUMP_SNAT = ['-m', 'comment', '--comment', 'kni:hostports-hairpin', '-j', HOSTPORT_SNAT_CHAIN];

/**
 * The DNAT and hairpin-SNAT rules of one family, for every target. `podRanges`: this node's pod
 * ranges of that family; only a pod's own connections through a host port are masqueraded
 * (its reply must come back through the node), a client elsewhere keeps its source address.
 * The node's own connections to 127.0.0.1:<host port> leave with the pods' IPv4 gateway as their
 * source (`gateway4`): the kernel routes 127.0.0.0/8 off loopback only with route_localnet on
 * the way out (syncHostPorts sets it) and the pod could not answer 127.0.0.1, as the portmap
 * plugin's SNAT does. There is no such way for ::1 (the kernel drops a reply addressed to ::1
 * that comes in on any other link than lo): ::1 is left to kni's relay (loopback6-ports.ts).
 */
export function hostPortRules(f: Family, targets: HostPortTarget[], podRanges: string[], gateway4 = ''): { dnat: string[][]; snat: string[][] } {
  const dnat: string[][] = [];
  const snat: string[][] = [];
  for (const t of targets) {
    const pod = t.addresses.find((a) => a.family === f)?.address;
    if (!pod) continue;
    for (const m of t.mappings) {
      if (m.hostIp && familyOf(m.hostIp) !== f) continue;
      dnat.push(hostPortDnat(f, t.sandbox, pod, m));
      for (const range of podRanges) snat.push(['-s', range, '-d', pod, '-p', m.protocol, '--dport', String(m.containerPort), '-m', 'conntrack', '--ctstate', 'DNAT', '-m', 'comment', '--comment', `kni:${t.sandbox}`, '-j', 'MASQUERADE']);
      if (f === 4 && gateway4 && (!m.hostIp || m.hostIp.startsWith('127.'))) snat.push(['-s', LOOPBACK4, '-d', pod, '-p', m.protocol, '--dport', String(m.containerPort), '-m', 'conntrack', '--ctstate', 'DNAT', '-m', 'comment', '--comment', `kni:${t.sandbox}`, '-j', 'SNAT', '--to-source', gateway4]);
    }
  }
  // ::1 is left to kni's relay (loopback6-ports.ts): a DNAT of it could never be answered.
  if (f === 6 && dnat.length) dnat.unshift(['-d', '::1/128', '-m', 'comment', '--comment', 'kni: [::1] host ports are relayed by kni', '-j', 'RETURN']);
  return { dnat, snat };
}

/** The DNAT rule of one mapping of a sandbox's pod (at `pod`, of family f) in KNI-HOSTPORTS. */
export function hostPortDnat(f: Family, sandbox: string, pod: string, m: PortMapping): string[] {
  const to = f === 4 ? `${pod}:${m.containerPort}` : `[${pod}]:${m.containerPort}`;
  return [...(m.hostIp ? ['-d', m.hostIp] : []), '-p', m.protocol, '--dport', String(m.hostPort), '-m', 'comment', '--comment', `kni:${sandbox}`, '-j', 'DNAT', '--to-destination', to];
}

/**
 * Makes the node's host-port rules exactly those of `targets`, for each family of `ranges`, and
 * lets 127.0.0.1 reach them: route_localnet on each link a host port's pod is reached through
 * (`links`: the bridge, or routed pods' host ends). Packets from elsewhere to 127.0.0.0/8, which
 * route_localnet would let in, are dropped in kni's nftables table (node-guards.ts).
 */
export async function syncHostPorts(ranges: Cidr[], targets: HostPortTarget[], links: string[] = []): Promise<void> {
  for (const link of links) {
    try {
      fs.writeFileSync(`/proc/sys/net/ipv4/conf/${link}/route_localnet`, '1');
    } catch (e) {
      // A link gone meanwhile (its pod detached): nothing to reach through it.
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
  }
  for (const f of [...new Set(ranges.map((c) => c.family))]) {
    const v4 = ranges.find((c) => c.family === 4);
    const { dnat, snat } = hostPortRules(f, targets, ranges.filter((c) => c.family === f).map((c) => c.text), v4 ? formatIp(4, v4.base + 1n) : '');
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
