// A sandbox's record compared with the kernel (Check, reconcile), and the routes a record
// implies (GetPod).
import type { NetworkRuntime, RouteInfo } from './network-runtime';
import { parseCidr } from '../ipam/ip';
import { addrList } from '../netlink/addr';
import { IFF_UP, linkByName } from '../netlink/link';
import { socketInNetns } from '../netns/netns';
import { NetnsHandle, reopenRecordedNetns } from '../netns/open-netns';
import { SandboxRecord } from '../store/records';

export function podRoutes(rec: SandboxRecord): RouteInfo[] {
  return rec.interfaces.flatMap((itf) =>
    itf.addresses.flatMap((a) => [
      // A CNI network's address names no kni range: its subnet is the address's own prefix.
      { destination: a.range.startsWith('cni:') ? parseCidr(`${a.address}/${a.prefixLength}`).text : a.range, gateway: '', interface: itf.name },
      ...(a.gateway ? [{ destination: a.family === 4 ? '0.0.0.0/0' : '::/0', gateway: a.gateway, interface: itf.name }] : []),
    ]),
  );
}

/** Compares a sandbox's record with the kernel; returns what does not match. */
export function checkSandbox(rt: NetworkRuntime, sandboxId: string): string[] {
  const rec = rt.get(sandboxId);
  const ns = reopenRecordedNetns(rec.netnsPath, rec.netnsInode);
  if (ns.state !== 'same') return [...hostProblems(rt, rec), ns.reason];
  try {
    return checkRecord(rt, rec, ns.handle);
  } finally {
    ns.handle.close();
  }
}

function hostProblems(rt: NetworkRuntime, rec: SandboxRecord): string[] {
  const problems: string[] = [];
  for (const itf of rec.interfaces) {
    const hostEnd = linkByName(rt.host, itf.hostVeth);
    if (!hostEnd) problems.push(`host veth ${itf.hostVeth} is missing`);
    else if (hostEnd.master !== rt.node.bridgeIndex) problems.push(`host veth ${itf.hostVeth} is not on bridge ${rt.cfg.bridge}`);
  }
  return problems;
}

/** What does not match between a record and the kernel, in the netns open on ns (the record's). */
export function checkRecord(rt: NetworkRuntime, rec: SandboxRecord, ns: NetnsHandle): string[] {
  const problems = hostProblems(rt, rec);
  try {
    const pod = socketInNetns(ns.fd);
    try {
      const addrs = addrList(pod);
      for (const itf of rec.interfaces) {
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
