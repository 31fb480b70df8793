// Addresses (RTM_*ADDR, struct ifaddrmsg).
import { Family, formatIp } from '../ipam/ip';
import { forEachAttr, readIpAt } from './attr';
import { BodyWriter, bodyWriter } from './body-writer';
import { NetlinkRequest, NetlinkSocket, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE } from './socket';

const RTM_NEWADDR = 20;
const RTM_DELADDR = 21;
const RTM_GETADDR = 22;
const IFA_ADDRESS = 1;
const IFA_LOCAL = 2;
const IFA_FLAGS = 8;
// Skip duplicate address detection: the address is usable at once instead of ~1 s later,
// and kni's IPAM already guarantees uniqueness on the bridge.
const IFA_F_NODAD = 0x02;
const IFA_F_PERMANENT = 0x80;

export interface Address {
  family: Family;
  address: string;
  prefixLength: number;
  index: number;
}

const afOf = (f: Family): number => (f === 4 ? 2 : 10);

/** A new body that starts with struct ifaddrmsg. */
function ifaddrmsg(family: Family, prefixLength: number, index: number): BodyWriter {
  const w = bodyWriter();
  const at = w.struct(8);
  w.u8At(at, afOf(family));
  w.u8At(at + 1, prefixLength);
  w.u32At(at + 4, index);
  return w;
}

export interface AddrSpec {
  family: Family;
  value: bigint;
  prefixLength: number;
  /** The address as text when the caller has it (only an error message needs it). */
  text?: string;
}

/** Adds an address to the link with that index; `replace` makes it idempotent. */
export function addrAdd(index: number, ifname: string, a: AddrSpec, replace = false): NetlinkRequest {
  const w = ifaddrmsg(a.family, a.prefixLength, index);
  w.ip(IFA_LOCAL, a.family, a.value);
  w.ip(IFA_ADDRESS, a.family, a.value);
  w.u32(IFA_FLAGS, a.family === 6 ? IFA_F_NODAD | IFA_F_PERMANENT : IFA_F_PERMANENT);
  return {
    type: RTM_NEWADDR,
    flags: NLM_F_CREATE | (replace ? NLM_F_REPLACE : NLM_F_EXCL),
    what: `add address ${a.text ?? formatIp(a.family, a.value)}/${a.prefixLength} to ${ifname}`,
    body: w.take(),
  };
}

/** Removes that address from the link with that index. */
export function addrDel(index: number, ifname: string, a: AddrSpec): NetlinkRequest {
  const w = ifaddrmsg(a.family, a.prefixLength, index);
  w.ip(IFA_LOCAL, a.family, a.value);
  return { type: RTM_DELADDR, flags: 0, what: `remove address ${a.text ?? formatIp(a.family, a.value)}/${a.prefixLength} from ${ifname}`, body: w.take() };
}

export function addrList(sock: NetlinkSocket): Address[] {
  const out: Address[] = [];
  sock.dumpEach(RTM_GETADDR, Buffer.alloc(8), 'list addresses', (m) => {
    const b = m.body;
    let local = '';
    let address = '';
    forEachAttr(b, 8, b.length, (type, start, end) => {
      if (type === IFA_LOCAL) local = readIpAt(b, start, end);
      else if (type === IFA_ADDRESS) address = readIpAt(b, start, end);
    });
    // Only IPv4 and IPv6 carry 4 or 16 bytes; nothing else is an address kni reads.
    if (local || address) out.push({ family: b.readUInt8(0) === 2 ? 4 : 6, address: local || address, prefixLength: b.readUInt8(1), index: b.readUInt32LE(4) });
  });
  return out;
}
