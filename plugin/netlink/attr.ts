// Netlink attribute (struct nlattr) encoding and decoding: 2-byte length, 2-byte type,
// payload, padded to 4 bytes.

export const NLA_F_NESTED = 0x8000;
const NLA_TYPE_MASK = 0x3fff;

export const align4 = (n: number): number => (n + 3) & ~3;

export function attr(type: number, payload: Buffer): Buffer {
  const len = 4 + payload.length;
  const b = Buffer.alloc(align4(len));
  b.writeUInt16LE(len, 0);
  b.writeUInt16LE(type, 2);
  payload.copy(b, 4);
  return b;
}

export const attrU8 = (type: number, v: number): Buffer => attr(type, Buffer.from([v]));

export function attrU32(type: number, v: number): Buffer {
  const p = Buffer.alloc(4);
  p.writeUInt32LE(v >>> 0);
  return attr(type, p);
}

/** A NUL-terminated string attribute (IFLA_IFNAME, IFLA_INFO_KIND). */
export const attrString = (type: number, s: string): Buffer =>
  attr(type, Buffer.concat([Buffer.from(s, 'utf8'), Buffer.from([0])]));

export const attrNested = (type: number, children: Buffer[]): Buffer =>
  attr(type | NLA_F_NESTED, Buffer.concat(children));

/** Attributes of one message or nest, by type (the last one wins, as in the kernel). */
export function parseAttrs(b: Buffer, offset = 0, end = b.length): Map<number, Buffer> {
  const out = new Map<number, Buffer>();
  let o = offset;
  while (o + 4 <= end) {
    const len = b.readUInt16LE(o);
    if (len < 4 || o + len > end) break;
    out.set(b.readUInt16LE(o + 2) & NLA_TYPE_MASK, b.subarray(o + 4, o + len));
    o += align4(len);
  }
  return out;
}

export const readString = (p: Buffer): string => {
  const nul = p.indexOf(0);
  return p.toString('utf8', 0, nul < 0 ? p.length : nul);
};
