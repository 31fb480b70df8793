// A client's bytes cut into HTTP/2 frames: the connection preface first (RFC 9113 §3.4), then
// each frame handed on whole, its header read and its payload a view of the bytes read.
import { ConnectionError, DEFAULT_MAX_FRAME, FRAME_HEADER, H2_ERROR, PREFACE } from './frames';

export class FrameReader {
  private buf: Buffer = Buffer.alloc(0);
  private prefaceSeen = false;
  private stopped = false;

  constructor(
    private readonly onPreface: () => void,
    private readonly onFrame: (type: number, flags: number, id: number, payload: Buffer) => void,
  ) {}

  /** No frame is handed on after this, not even the rest of the current read. */
  stop(): void {
    this.stopped = true;
  }

  /** Throws ConnectionError for bytes that are not HTTP/2; what onFrame throws passes through. */
  push(d: Buffer): void {
    if (this.stopped) return;
    // What is carried over is less than one frame (16 KiB): joining it to the next read copies
    // little, unlike the unbounded messages runtime-hooks/wire/byte-queue.ts exists for.
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    if (!this.prefaceSeen) {
      const n = Math.min(this.buf.length, PREFACE.length);
      if (!this.buf.subarray(0, n).equals(PREFACE.subarray(0, n))) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'not an HTTP/2 client preface');
      if (n < PREFACE.length) return;
      this.prefaceSeen = true;
      this.buf = this.buf.subarray(PREFACE.length);
      this.onPreface();
    }
    let at = 0;
    while (this.buf.length - at >= FRAME_HEADER && !this.stopped) {
      const b = this.buf;
      const len = (b[at] << 16) | (b[at + 1] << 8) | b[at + 2];
      if (len > DEFAULT_MAX_FRAME) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, `frame of ${len} bytes, above ${DEFAULT_MAX_FRAME}`);
      if (b.length - at < FRAME_HEADER + len) break;
      const type = b[at + 3];
      const flags = b[at + 4];
      const id = b.readUInt32BE(at + 5) & 0x7fffffff;
      const payload = b.subarray(at + FRAME_HEADER, at + FRAME_HEADER + len);
      at += FRAME_HEADER + len;
      this.onFrame(type, flags, id, payload);
    }
    this.buf = at === this.buf.length ? Buffer.alloc(0) : this.buf.subarray(at);
  }
}
