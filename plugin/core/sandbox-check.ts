// A record's interfaces compared with the kernel (Check, reconcile: the built-in network's here,
// a CNI network's through its plugins), and the routes a record implies (GetPod).
import type { Config } from './config';
import type { NodeLifecycle } from './node-lifecycle';
import { defaultGateways, isBuiltIn, NetworkBackend } from './network-backend';
import type { RouteInfo } from './runtime-types';
import type { NetlinkSocket } from '../netlink/socket';
import { bitsOf, defaultDestination, familyOf, parseCidr, parseIp } from '../ipam/ip';
import { addrList } from '../netlink/addr';
import { IFF_UP, Link, linkByName } from '../netlink/link';
import { routeGetOif } from '../netlink/route';
import { socketInNetns } from '../netns/netns';
import { NetnsHandle, reopenRecordedNetns } from '../netns/open-netns';
import { InterfaceRecord, SandboxRecord } from '../store/records';
import { tapProblems } from './vm-tap';

/** What the checks use of the runtime. */
export interface CheckParts {
  readonly host: NetlinkSocket;
  readonly cfg: Pick<Config, 'bridge'>;
  readonly node: Pick<NodeLifecycle, 'bridgeIndex'>;
  backendFor(rec: SandboxRecord, itf: InterfaceRecord): NetworkBackend | undefined;
}

/** A sandbox's interfaces compared with the kernel, each through its backend (Check); or only `one` of them (Trace). */
export async function sandboxProblems(rt: CheckParts, rec: SandboxRecord, one?: InterfaceRecord): Promise<string[]> {
  const ns = reopenRecordedNetns(rec.netnsPath, rec.netnsInode);
  if (ns.state !== 'same') return [ns.reason];
  try {
    const problems: string[] = [];
    for (const itf of one ? [one] : rec.interfaces) problems.push(...(await interfaceProblems(rt, rec, itf, ns.handle)));
    return one ? problems : [...problems, ...tapsProblems(rec, ns.handle)];
  } finally {
    ns.handle.close();
  }
}

/** A vm sandbox's taps compared with the kernel (kni's own, whatever network wired the interface). */
function tapsProblems(rec: SandboxRecord, ns: NetnsHandle): string[] {
  const withTaps = rec.interfaces.filter((i) => i.tap);
  if (!withTaps.length) return [];
  const pod = socketInNetns(ns.fd);
  try {
    return withTaps.flatMap((i) => tapProblems(pod, i));
  } finally {
    pod.close();
  }
}

/** One interface compared with the kernel through its backend (a CNI network: the plugins' CHECK). */
export function interfaceProblems(rt: CheckParts, rec: SandboxRecord, itf: InterfaceRecord, ns: NetnsHandle): Promise<string[]> {
  const backend = rt.backendFor(rec, itf);
  return backend ? backend.check(rec, itf, ns) : Promise.resolve([`${itf.name}: its network ${itf.network || 'default'} is no longer defined`]);
}

export function podRoutes(rec: SandboxRecord): RouteInfo[] {
  return rec.interfaces.flatMap((itf) => [
    // A CNI network's address names no kni range: its subnet is the address's own prefix. A
    // routed pod has no subnet on its link, only the gateway.
    ...itf.addresses.map((a) => ({ destination: a.range.startsWith('cni:') ? parseCidr(`${a.address}/${a.prefixLength}`).text : itf.routed ? `${a.gateway}/${bitsOf(a.family)}` : a.range, gateway: '', interface: itf.name })),
    ...defaultGateways(rec, itf).map((g) => ({ destination: defaultDestination(familyOf(g)), gateway: g, interface: itf.name })),
  ]);
}

/** The host ends of built-in interfaces compared with the kernel (the node's netns only: no netns entered). */
export function hostProblems(rt: CheckParts, itfs: InterfaceRecord[]): string[] {
  const problems: string[] = [];
  for (const itf of itfs) {
    const hostEnd = linkByName(rt.host, itf.hostVeth);
    if (!hostEnd) problems.push(`host veth ${itf.hostVeth} is missing`);
    else if (!(hostEnd.flags & IFF_UP)) problems.push(`host veth ${itf.hostVeth} is down`);
    else if (itf.routed) problems.push(...routedHostProblems(rt, itf, hostEnd));
    else if (hostEnd.master !== rt.node.bridgeIndex) problems.push(`host veth ${itf.hostVeth} is not on bridge ${rt.cfg.bridge}`);
  }
  return problems;
}

/** A routed host end: on no bridge, and the node's way to each of the pod's addresses. */
function routedHostProblems(rt: CheckParts, itf: InterfaceRecord, hostEnd: Link): string[] {
  if (hostEnd.master) return [`host veth ${itf.hostVeth} of a routed pod is a port of link ${hostEnd.master}`];
  return itf.addresses
    .filter((a) => {
      const ip = parseIp(a.address);
      return routeGetOif(rt.host, ip.family, ip.value, a.address) !== hostEnd.index;
    })
    .map((a) => `no route to ${a.address} through host veth ${itf.hostVeth}`);
}

/**
 * What does not match between a record's built-in interfaces (or the ones given) and the
 * kernel, in the netns open on ns (the record's).
 */
export function checkRecord(rt: CheckParts, rec: SandboxRecord, ns: NetnsHandle, itfs = rec.interfaces.filter(isBuiltIn)): string[] {
  if (!itfs.length) return [];
  const problems = hostProblems(rt, itfs);
  try {
    const pod = socketInNetns(ns.fd);
    try {
      const addrs = addrList(pod);
      for (const itf of itfs) {
        const link = linkByName(pod, itf.name);
        if (!link) {
          problems.push(`${itf.name} is missing in netns ${rec.netnsPath}`);
          continue;
        }
        if (!(link.flags & IFF_UP)) problems.push(`${itf.name} is down`);
        for (const a of itf.addresses) {
          if (!addrs.some((x) => x.index === link.index && x.address === a.address)) problems.push(`${itf.name} lacks address ${a.address}`);
        }
      }
    } finally {
      pod.close();
    }
  } catch (e) {
    problems.push(`cannot enter netns ${rec.netnsPath}: ${(e as Error).message}`);
  }
  return problems;
}
