// Addresses (RTM_*ADDR, struct ifaddrmsg).
import { Family, formatIp, ipBytes } from '../ipam/ip';
import { attr, attrU32, parseAttrs } from './attr';
import { NetlinkRequest, NetlinkSocket, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE } from './socket';

const RTM_NEWADDR = 20;
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

function ifaddrmsg(family: Family, prefixLength: number, index: number): Buffer {
  const b = Buffer.allocUnsafe(8).fill(0); // from the pool: see attr.ts
  b.writeUInt8(afOf(family), 0);
  b.writeUInt8(prefixLength, 1);
  b.writeUInt32LE(index, 4);
  return b;
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
  const ip = ipBytes(a.family, a.value);
  const flags = a.family === 6 ? IFA_F_NODAD | IFA_F_PERMANENT : IFA_F_PERMANENT;
  return {
    type: RTM_NEWADDR,
    flags: NLM_F_CREATE | (replace ? NLM_F_REPLACE : NLM_F_EXCL),
    what: `add address ${a.text ?? formatIp(a.family, a.value)}/${a.prefixLength} to ${ifname}`,
    body: Buffer.concat([
      ifaddrmsg(a.family, a.prefixLength, index),
      attr(IFA_LOCAL, ip),
      attr(IFA_ADDRESS, ip),
      attrU32(IFA_FLAGS, flags),
    ]),
  };
}

export function addrList(sock: NetlinkSocket): Address[] {
  return sock.dump(RTM_GETADDR, Buffer.alloc(8), 'list addresses').map((m) => {
    const family: Family = m.body.readUInt8(0) === 2 ? 4 : 6;
    const a = parseAttrs(m.body, 8);
    const raw = a.get(IFA_LOCAL) ?? a.get(IFA_ADDRESS) ?? Buffer.alloc(family === 4 ? 4 : 16);
    const value = [...raw].reduce((acc, x) => (acc << 8n) | BigInt(x), 0n);
    return { family, address: formatIp(family, value), prefixLength: m.body.readUInt8(1), index: m.body.readUInt32LE(4) };
  });
}
