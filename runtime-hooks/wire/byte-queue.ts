// Bytes arriving on a stream, read as length-prefixed frames. Chunks are kept as they came and
// joined only when a whole frame is taken: buffering is linear in what arrives (appending each
// chunk to one growing Buffer copied everything again on every chunk, which made an 8 MiB
// request sent in 64 KiB pieces cost ~500 MiB of copying and blocked the event loop for seconds).
export class ByteQueue {
  private chunks: Buffer[] = [];
  length = 0;

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.chunks.push(chunk);
    this.length += chunk.length;
  }

  /** The first n bytes without taking them (n ≤ length). */
  peek(n: number): Buffer {
    if (this.chunks[0].length >= n) return this.chunks[0].subarray(0, n);
    return this.join(n, false);
  }

  /** Takes the first n bytes (n ≤ length). */
  take(n: number): Buffer {
    return this.join(n, true);
  }

  /** A big-endian uint32 at offset o (o + 4 ≤ length), read in place when one chunk holds it. */
  u32(o: number): number {
    const c = this.chunks[0];
    return c.length >= o + 4 ? c.readUInt32BE(o) : this.peek(o + 4).readUInt32BE(o);
  }

  /** Drops the first n bytes (n ≤ length) without copying them. */
  skip(n: number): void {
    if (n > this.length) throw new RangeError(`${n} bytes to skip, ${this.length} queued`);
    this.length -= n;
    let i = 0;
    while (n > 0) {
      const c = this.chunks[i];
      if (c.length <= n) {
        n -= c.length;
        i++;
      } else {
        this.chunks[i] = c.subarray(n);
        n = 0;
      }
    }
    if (i) this.chunks.splice(0, i);
  }

  /** Drops everything (a connection given up on). */
  clear(): void {
    this.chunks = [];
    this.length = 0;
  }

  private join(n: number, consume: boolean): Buffer {
    if (n > this.length) throw new RangeError(`${n} bytes asked, ${this.length} queued`);
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    let i = 0;
    while (filled < n) {
      const c = this.chunks[i];
      const part = Math.min(c.length, n - filled);
      c.copy(out, filled, 0, part);
      filled += part;
      if (part === c.length) i++;
      else if (consume) this.chunks[i] = c.subarray(part);
    }
    if (consume) {
      this.chunks.splice(0, i);
      this.length -= n;
    }
    return out;
  }
}
