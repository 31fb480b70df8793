// Netlink attribute (struct nlattr) encoding and decoding: 2-byte length, 2-byte type,
// payload, padded to 4 bytes.

export const NLA_F_NESTED = 0x8000;
const NLA_TYPE_MASK = 0x3fff;

export const align4 = (n: number): number => (n + 3) & ~3;

// Each builder makes its attribute in one buffer from Node's pool (allocUnsafe) and zeroes only
// the padding: an attach builds ≈ 30 attributes, and a zero-filled allocation per payload and
// per attribute was most of their cost (with ipBytes, all of an attach's messages: ≈ 14.5 → 12 µs warm).

/** A buffer for an attribute of `len` bytes (header included), header written, padding zeroed. */
function header(type: number, len: number): Buffer {
  const size = align4(len);
  const b = Buffer.allocUnsafe(size);
  b.writeUInt16LE(len, 0);
  b.writeUInt16LE(type, 2);
  b.fill(0, len, size);
  return b;
}

export function attr(type: number, payload: Buffer): Buffer {
  const b = header(type, 4 + payload.length);
  payload.copy(b, 4);
  return b;
}

export function attrU8(type: number, v: number): Buffer {
  const b = header(type, 5);
  b.writeUInt8(v, 4);
  return b;
}

export function attrU32(type: number, v: number): Buffer {
  const b = header(type, 8);
  b.writeUInt32LE(v >>> 0, 4);
  return b;
}

/** A NUL-terminated string attribute (IFLA_IFNAME, IFLA_INFO_KIND). */
export function attrString(type: number, s: string): Buffer {
  const n = Buffer.byteLength(s, 'utf8');
  const b = header(type, 4 + n + 1);
  b.write(s, 4, 'utf8');
  b[4 + n] = 0;
  return b;
}

/** A nest of attributes (each already padded to 4 bytes). */
export function attrNested(type: number, children: Buffer[]): Buffer {
  let len = 4;
  for (const c of children) len += c.length;
  const b = header(type | NLA_F_NESTED, len);
  let o = 4;
  for (const c of children) o += c.copy(b, o);
  return b;
}

/**
 * Calls fn(type, start, end) for each attribute of one message or nest in b, in order, with
 * the payload's bounds: callers read what they need in place.
 */
export function forEachAttr(b: Buffer, offset: number, end: number, fn: (type: number, start: number, end: number) => void): void {
  for (let o = offset; o + 4 <= end; ) {
    const len = b.readUInt16LE(o);
    if (len < 4 || o + len > end) break;
    fn(b.readUInt16LE(o + 2) & NLA_TYPE_MASK, o + 4, o + len);
    o += align4(len);
  }
}

/** Attributes of one message or nest, by type (the last one wins, as in the kernel). */
export function parseAttrs(b: Buffer, offset = 0, end = b.length): Map<number, Buffer> {
  const out = new Map<number, Buffer>();
  forEachAttr(b, offset, end, (type, start, stop) => out.set(type, b.subarray(start, stop)));
  return out;
}

/** A NUL-terminated string between start and end of b. */
export function readStringAt(b: Buffer, start: number, end: number): string {
  const nul = b.indexOf(0, start);
  return b.toString('utf8', start, nul < 0 || nul > end ? end : nul);
}

export const readString = (p: Buffer): string => readStringAt(p, 0, p.length);
