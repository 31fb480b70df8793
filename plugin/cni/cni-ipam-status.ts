// IPAM status of a CNI default network, from what its config says: the ranges of a host-local
// IPAM (subnet, rangeStart, rangeEnd) and the addresses kni's records hold in them. host-local
// has no query of its own (STATUS only says whether it can serve at all), so this is the most
// the plugins tell; other IPAM plugins report no ranges.
import { cidrContains, cidrSize, parseCidr, parseIp } from '../ipam/ip';
import type { RangeStatus } from '../ipam/ipam';
import type { NetworkConfList } from './conflist';

interface HostLocalRange {
  subnet?: string;
  rangeStart?: string;
  rangeEnd?: string;
}

export function cniIpamStatus(list: NetworkConfList, addresses: string[]): RangeStatus[] {
  const out: RangeStatus[] = [];
  for (const p of list.plugins) {
    const ipam = p.ipam as { type?: string; ranges?: unknown; subnet?: string; rangeStart?: string; rangeEnd?: string } | undefined;
    if (!ipam || ipam.type !== 'host-local') continue;
    const sets: HostLocalRange[][] = Array.isArray(ipam.ranges) ? (ipam.ranges as HostLocalRange[][]) : ipam.subnet ? [[{ subnet: ipam.subnet, rangeStart: ipam.rangeStart, rangeEnd: ipam.rangeEnd }]] : [];
    for (const set of sets) {
      if (!Array.isArray(set)) continue;
      for (const r of set) {
        let cidr;
        try {
          cidr = parseCidr(String(r?.subnet));
        } catch {
          continue; // usePodCidr and other plugin-specific values: not a range kni can count
        }
        const total = cidrSize(cidr);
        // As host-local: the network address, the gateway (.1) and, for IPv4, broadcast are not handed out.
        let first = cidr.base + 2n;
        let last = cidr.base + total - (cidr.family === 4 ? 2n : 1n);
        try {
          if (r.rangeStart) first = parseIp(r.rangeStart).value;
          if (r.rangeEnd) last = parseIp(r.rangeEnd).value;
        } catch {
          // a bad bound: the whole subnet
        }
        const size = last >= first ? last - first + 1n : 0n;
        const used = addresses.filter((a) => {
          const ip = parseIp(a);
          return cidrContains(cidr, ip.family, ip.value) && ip.value >= first && ip.value <= last;
        }).length;
        const free = size - BigInt(used) > 0n ? size - BigInt(used) : 0n;
        out.push({ cidr: cidr.text, family: cidr.family, size, used, free, exhausted: free === 0n });
      }
    }
  }
  return out;
}
