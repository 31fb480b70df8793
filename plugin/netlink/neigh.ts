// Neighbour and forwarding-database entries (RTM_*NEIGH, struct ndmsg): what a vxlan overlay
// needs so that no ARP/NDP or flooding crosses it (flannel's model: both are written ahead).
import { Family, familyOf as ipFamily, parseIp } from '../ipam/ip';
import { forEachAttr, readIpAt, readMacAt } from './attr';
import { BodyWriter, bodyWriter } from './body-writer';
import { NetlinkRequest, NetlinkSocket, NLM_F_CREATE, NLM_F_REPLACE } from './socket';

const RTM_NEWNEIGH = 28;
const RTM_DELNEIGH = 29;
const RTM_GETNEIGH = 30;
const NDA_DST = 1;
const NDA_LLADDR = 2;
const NUD_PERMANENT = 0x80;
const NTF_SELF = 0x02;
const NTF_PROXY = 0x08;
const AF_BRIDGE = 7;
const afOf = (f: Family): number => (f === 4 ? 2 : 10);

export interface Neighbour {
  /** 4 or 6: an IP → MAC entry; 'fdb': a MAC → remote endpoint entry of a vxlan device. */
  family: Family | 'fdb';
  index: number;
  ip: string;
  mac: string;
}

/** A new body that starts with struct ndmsg. */
function ndmsg(family: number, index: number, state: number, flags: number): BodyWriter {
  const w = bodyWriter();
  const at = w.struct(12);
  w.u8At(at, family);
  w.i32At(at + 4, index);
  w.u16At(at + 8, state);
  w.u8At(at + 10, flags);
  return w;
}

const familyOf = (n: Neighbour): number => (n.family === 'fdb' ? AF_BRIDGE : afOf(n.family));
const describe = (n: Neighbour): string => (n.family === 'fdb' ? `fdb ${n.mac} dst ${n.ip}` : `neighbour ${n.ip} lladdr ${n.mac}`);

/** A permanent entry, replacing whatever the link had for that IP (or MAC, for the FDB). */
export function neighSet(n: Neighbour): NetlinkRequest {
  const ip = parseIp(n.ip);
  const w = ndmsg(familyOf(n), n.index, NUD_PERMANENT, n.family === 'fdb' ? NTF_SELF : 0);
  w.mac(NDA_LLADDR, n.mac);
  w.ip(NDA_DST, ip.family, ip.value);
  return { type: RTM_NEWNEIGH, flags: NLM_F_CREATE | NLM_F_REPLACE, what: `set ${describe(n)} (link ${n.index})`, body: w.take() };
}

/**
 * A proxy entry: the link answers ARP or NDP for ip with its own MAC (IPv6 needs the link's
 * proxy_ndp sysctl and forwarding on). Replaces one already there.
 */
export function neighProxyAdd(family: Family, index: number, ip: string): NetlinkRequest {
  const w = ndmsg(afOf(family), index, NUD_PERMANENT, NTF_PROXY);
  w.ip(NDA_DST, family, parseIp(ip).value);
  return { type: RTM_NEWNEIGH, flags: NLM_F_CREATE | NLM_F_REPLACE, what: `set proxy neighbour ${ip} (link ${index})`, body: w.take() };
}

export function neighDel(n: Neighbour): NetlinkRequest {
  const ip = parseIp(n.ip);
  const w = ndmsg(familyOf(n), n.index, 0, n.family === 'fdb' ? NTF_SELF : 0);
  // An FDB entry is keyed by its MAC (the endpoint narrows it), a neighbour by its IP.
  if (n.family === 'fdb') w.mac(NDA_LLADDR, n.mac);
  w.ip(NDA_DST, ip.family, ip.value);
  return { type: RTM_DELNEIGH, flags: 0, what: `delete ${describe(n)} (link ${n.index})`, body: w.take() };
}

/** The permanent entries of one link (IPv4, IPv6 and FDB, or those asked), read in place (a vxlan node holds two per other node). */
export function neighList(sock: NetlinkSocket, index: number, families: Neighbour['family'][] = [4, 6, 'fdb']): Neighbour[] {
  const out: Neighbour[] = [];
  for (const fam of families.map((f) => (f === 4 ? 2 : f === 6 ? 10 : AF_BRIDGE))) {
    sock.dumpEach(RTM_GETNEIGH, ndmsg(fam, index, 0, 0).take(), 'list neighbours', (m) => {
      const b = m.body;
      if (b.readInt32LE(4) !== index || !(b.readUInt16LE(8) & NUD_PERMANENT)) return;
      let ip = '';
      let mac = '';
      forEachAttr(b, 12, b.length, (type, start, end) => {
        if (type === NDA_DST) ip = readIpAt(b, start, end);
        else if (type === NDA_LLADDR && end - start === 6) mac = readMacAt(b, start, end);
      });
      if (ip && mac) out.push({ family: fam === AF_BRIDGE ? 'fdb' : ipFamily(ip), index, ip, mac });
    });
  }
  return out;
}
