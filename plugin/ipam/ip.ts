// IP addresses as bigints, and CIDR prefixes. Node's `net` validates addresses but has no
// conversion to bytes or arithmetic, which IPAM and netlink encoding need.
import net from 'node:net';

export type Family = 4 | 6;

export interface Cidr {
  family: Family;
  /** The network address (host bits cleared). */
  base: bigint;
  prefixLength: number;
  /** The canonical text, e.g. "10.244.0.0/24", "fd00:10:244::/64". */
  text: string;
}

export const bitsOf = (f: Family): number => (f === 4 ? 32 : 128);
/** The family of an address's text already known valid (no parse: an IPv6 text has a colon, an IPv4 one none). */
export const familyOf = (ip: string): Family => (ip.includes(':') ? 6 : 4);
/** The default route's destination in a family. */
export const defaultDestination = (f: Family): string => (f === 4 ? '0.0.0.0/0' : '::/0');

/**
 * Parsed addresses by text: the same few (gateways, a pod's own) are parsed several times per
 * attach, and net.isIP's regular expressions and the bigint arithmetic cost ≈ 1 µs each even
 * when warm. Bounded: emptied when full.
 */
const parsed = new Map<string, Readonly<{ family: Family; value: bigint }>>();
const PARSED_MAX = 4096;

export function parseIp(s: string): Readonly<{ family: Family; value: bigint }> {
  return parsed.get(s) ?? remember(s, parseIpText(s));
}

function remember(s: string, ip: { family: Family; value: bigint }): Readonly<{ family: Family; value: bigint }> {
  if (parsed.size >= PARSED_MAX) parsed.clear();
  const frozen = Object.freeze(ip);
  parsed.set(s, frozen);
  return frozen;
}

/**
 * formatIp for an address just allocated, its text remembered as parsed: the pod's wiring
 * parses it again, and net.isIP's IPv6 expression is the dearest part of that, cold.
 */
export function formatNewIp(family: Family, v: bigint): string {
  const s = formatIp(family, v);
  remember(s, { family, value: v });
  return s;
}

function parseIpText(s: string): { family: Family; value: bigint } {
  const kind = net.isIP(s);
  if (kind === 4) {
    const v = s.split('.').reduce((acc, p) => (acc << 8n) | BigInt(Number(p)), 0n);
    return { family: 4, value: v };
  }
  if (kind === 6) {
    if (s.includes('.')) throw new Error(`IPv4-embedded IPv6 address not supported: ${s}`);
    const [head, tail] = s.includes('::') ? s.split('::') : [s, undefined];
    const h = head ? head.split(':') : [];
    const t = tail ? tail.split(':') : [];
    const groups = tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill('0'), ...t];
    const v = groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
    return { family: 6, value: v };
  }
  throw new Error(`not an IP address: ${JSON.stringify(s)}`);
}

/** formatIp's groups of an IPv6 address (JavaScript runs one formatIp at a time). */
const GROUPS = new Array<number>(8).fill(0);

export function formatIp(family: Family, v: bigint): string {
  // Numbers, not a bigint operation per group, and strings built in loops, not arrays: every
  // allocation formats its addresses, cold (docs/performance-history.md).
  if (family === 4) {
    const n = Number(v & 0xffffffffn);
    return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
  }
  for (let i = 0; i < 4; i++) {
    const chunk = Number((v >> BigInt(96 - 32 * i)) & 0xffffffffn);
    GROUPS[2 * i] = chunk >>> 16;
    GROUPS[2 * i + 1] = chunk & 0xffff;
  }
  return groupsText();
}

/**
 * An address's text from its bytes in network order (4 or 16 of them, as netlink carries it),
 * with no bigint: a dump of the routes to 5,000 nodes' pods made one per byte, most of a check's time.
 */
export function formatIpBytes(b: Uint8Array, start = 0, length = b.length - start): string {
  if (length === 4) return `${b[start]}.${b[start + 1]}.${b[start + 2]}.${b[start + 3]}`;
  if (length !== 16) throw new Error(`an address of ${length} bytes is neither IPv4 nor IPv6`);
  for (let i = 0; i < 8; i++) GROUPS[i] = (b[start + 2 * i] << 8) | b[start + 2 * i + 1];
  return groupsText();
}

/** GROUPS as RFC 5952 text. */
function groupsText(): string {
  const groups = GROUPS;
  // RFC 5952: compress the longest run (length ≥ 2) of zero groups, leftmost on ties.
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) { i++; continue; }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) { best = i; bestLen = j - i; }
    i = j;
  }
  let out = '';
  for (let i = 0; i < 8; i++) {
    if (i === best) {
      out += '::';
      i += bestLen - 1;
      continue;
    }
    // A group after the first or after "::" needs no separator of its own.
    out += i === 0 || i === best + bestLen ? groups[i].toString(16) : `:${groups[i].toString(16)}`;
  }
  return out;
}

const MASK64 = (1n << 64n) - 1n;

/** The address in network byte order (two 64-bit writes for IPv6: a bigint op per byte was an attach's dearest message step). */
export function ipBytes(family: Family, v: bigint): Buffer {
  const b = Buffer.allocUnsafe(family === 4 ? 4 : 16);
  writeIp(b, 0, family, v);
  return b;
}

/** The address in network byte order at offset `at` of b; returns the offset after it. */
export function writeIp(b: Buffer, at: number, family: Family, v: bigint): number {
  if (family === 4) return b.writeUInt32BE(Number(v & 0xffffffffn), at);
  b.writeBigUInt64BE((v >> 64n) & MASK64, at);
  return b.writeBigUInt64BE(v & MASK64, at + 8);
}

/** Whether address text (from input: maybe no address, maybe spelled otherwise) is that address. */
export function isSameIp(text: string, ip: { family: Family; value: bigint }): boolean {
  try {
    const other = parseIp(text);
    return other.family === ip.family && other.value === ip.value;
  } catch {
    return false;
  }
}

/** Whether CIDR text holds an address; false for text that is no CIDR (objects read from the API are input). */
export function cidrTextHolds(text: string, ip: { family: Family; value: bigint }): boolean {
  try {
    const c = parseCidr(text);
    return c.family === ip.family && cidrContains(c, ip.family, ip.value);
  } catch {
    return false;
  }
}

export function parseCidr(s: string): Cidr {
  if (typeof s !== 'string') throw new Error(`not a CIDR: ${JSON.stringify(s)}`);
  const m = /^([^/]+)\/(\d{1,3})$/.exec(s.trim());
  if (!m) throw new Error(`not a CIDR (want address/prefix): ${JSON.stringify(s)}`);
  const { family, value } = parseIp(m[1]);
  const prefixLength = Number(m[2]);
  const bits = bitsOf(family);
  if (prefixLength > bits) throw new Error(`prefix length ${prefixLength} is too long for IPv${family} in ${JSON.stringify(s)}`);
  const hostMask = (1n << BigInt(bits - prefixLength)) - 1n;
  const base = value & ~hostMask;
  return { family, base, prefixLength, text: `${formatIp(family, base)}/${prefixLength}` };
}

export const cidrSize = (c: Cidr): bigint => 1n << BigInt(bitsOf(c.family) - c.prefixLength);

export const cidrContains = (c: Cidr, family: Family, v: bigint): boolean =>
  family === c.family && v >= c.base && v < c.base + cidrSize(c);

/** Whether every address of `inner` is in `outer`. */
export const cidrCovers = (outer: Cidr, inner: Cidr): boolean => outer.prefixLength <= inner.prefixLength && cidrContains(outer, inner.family, inner.base);

export function cidrsOverlap(a: Cidr, b: Cidr): boolean {
  if (a.family !== b.family) return false;
  return a.base < b.base + cidrSize(b) && b.base < a.base + cidrSize(a);
}
