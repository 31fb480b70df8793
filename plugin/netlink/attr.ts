// Netlink attributes (struct nlattr): 2-byte length, 2-byte type, payload, padded to 4 bytes.
// Decoded here; requests are written by body-writer.ts.
import { formatIpBytes } from '../ipam/ip';

export const NLA_F_NESTED = 0x8000;
const NLA_TYPE_MASK = 0x3fff;

export const align4 = (n: number): number => (n + 3) & ~3;

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

/**
 * An address attribute between start and end of b, as text; '' when it is neither 4 nor 16
 * bytes (nothing kni reads: a dump never throws for it).
 */
export const readIpAt = (b: Buffer, start: number, end: number): string => (end - start === 4 || end - start === 16 ? formatIpBytes(b, start, end - start) : '');

/** A link-layer address between start and end of b, as "0a:58:…". */
export function readMacAt(b: Buffer, start: number, end: number): string {
  let s = '';
  for (let i = start; i < end; i++) s += `${i > start ? ':' : ''}${b[i] < 16 ? '0' : ''}${b[i].toString(16)}`;
  return s;
}
