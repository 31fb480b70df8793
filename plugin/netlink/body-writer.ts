// A request body written in place: the fixed header and every attribute, nests included, go
// straight into one scratch buffer, and the body is copied out once. Every request builder
// uses it (link.ts, addr.ts, route.ts, neigh.ts, tc.ts, nsid.ts).
//
// Why not a buffer per attribute and a concat per message, as before: the pod end's write of
// an attach was eleven requests in ≈ 60 small buffers (a view each, most from Node's pool),
// and run cold between requests, an attach's requests took ≈ 0.1 ms to make; written in
// place, ≈ 30 µs less (docs/performance-history.md).
import { Family, writeIp } from '../ipam/ip';
import { align4, NLA_F_NESTED } from './attr';

const COLON = 0x3a;
const ZERO = 0x30;
const NINE = 0x39;
const LOWER_A = 0x61;

/**
 * One scratch buffer per thread: a body is begun, written and taken (copied out) by one
 * builder with no other builder running in between, and JavaScript runs one builder at a time.
 */
const SCRATCH = Buffer.allocUnsafe(16 * 1024);

export class BodyWriter {
  private o = 0;
  private b = SCRATCH;

  /** Makes room for n more bytes: a body larger than the scratch buffer gets a buffer of its own. */
  private room(n: number): void {
    if (this.o + n <= this.b.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(2 * this.b.length, this.o + n));
    this.b.copy(bigger, 0, 0, this.o);
    this.b = bigger;
  }

  /** n zero bytes (a struct such as ifinfomsg), filled in by the caller; returns their offset. */
  struct(n: number): number {
    this.room(n);
    const at = this.o;
    this.b.fill(0, at, at + n);
    this.o += n;
    return at;
  }

  u8At(at: number, v: number): void {
    this.b[at] = v;
  }

  u16At(at: number, v: number): void {
    this.b.writeUInt16LE(v, at);
  }

  u32At(at: number, v: number): void {
    this.b.writeUInt32LE(v >>> 0, at);
  }

  i32At(at: number, v: number): void {
    this.b.writeInt32LE(v, at);
  }

  /** An attribute's header for `payload` bytes; returns the payload's offset. Padding is the caller's (pad()). */
  private header(type: number, payload: number): number {
    this.room(align4(4 + payload));
    const at = this.o;
    this.b.writeUInt16LE(4 + payload, at);
    this.b.writeUInt16LE(type, at + 2);
    this.o = at + 4;
    return at + 4;
  }

  /** Zeroes up to the next multiple of 4. */
  private pad(): void {
    const end = align4(this.o);
    while (this.o < end) this.b[this.o++] = 0;
  }

  u8(type: number, v: number): void {
    this.header(type, 1);
    this.b[this.o++] = v;
    this.pad();
  }

  u32(type: number, v: number): void {
    const at = this.header(type, 4);
    this.b.writeUInt32LE(v >>> 0, at);
    this.o = at + 4;
  }

  /** A NUL-terminated string (IFLA_IFNAME, IFLA_INFO_KIND). */
  string(type: number, s: string): void {
    const n = Buffer.byteLength(s, 'utf8');
    const at = this.header(type, n + 1);
    this.b.write(s, at, 'utf8');
    this.b[at + n] = 0;
    this.o = at + n + 1;
    this.pad();
  }

  bytes(type: number, src: Buffer): void {
    const at = this.header(type, src.length);
    this.o = at + src.copy(this.b, at);
    this.pad();
  }

  /** An address in network byte order: 4 bytes for IPv4, 16 for IPv6. */
  ip(type: number, family: Family, v: bigint): void {
    this.o = writeIp(this.b, this.header(type, family === 4 ? 4 : 16), family, v);
  }

  /** A MAC written from its text ("0a:58:…"), one byte per colon-separated hex group. */
  mac(type: number, mac: string): void {
    this.room(4 + mac.length + 3);
    const start = this.begin(type, false);
    let v = 0;
    for (let i = 0; i <= mac.length; i++) {
      const c = i < mac.length ? mac.charCodeAt(i) : COLON;
      if (c === COLON) {
        this.b[this.o++] = v;
        v = 0;
      } else {
        v = v * 16 + (c <= NINE ? c - ZERO : (c | 0x20) - LOWER_A + 10);
      }
    }
    this.end(start);
    this.pad();
  }

  /** Opens a nest (or any attribute whose payload follows); close it with end(). */
  begin(type: number, nested = true): number {
    const at = this.o;
    this.header(nested ? type | NLA_F_NESTED : type, 0);
    return at;
  }

  /** Closes the attribute begun at `at`: its length is what was written since. */
  end(at: number): void {
    this.b.writeUInt16LE(this.o - at, at);
  }

  /** The body, copied out of the scratch buffer (one allocation from Node's pool). */
  take(): Buffer {
    const out = Buffer.allocUnsafe(this.o);
    this.b.copy(out, 0, 0, this.o);
    return out;
  }
}

/** A new body in the thread's scratch buffer (the previous one must have been taken). */
export const bodyWriter = (): BodyWriter => new BodyWriter();
