// The frames one event-loop turn produces (an answer's HEADERS, DATA and trailers; the acks of
// a read) joined and sent in one socket write: one wake-up of the client, not one a frame.
// Frames held back (PING acks while a call is being served) go with the next write.
import net from 'node:net';

/** Bytes written and not yet read by the client past which the connection is dropped. */
const MAX_UNREAD = 64 << 20;

export class FrameWriter {
  private out: Buffer[] = [];
  private flushQueued = false;
  private heldTimer: NodeJS.Timeout | undefined;

  constructor(private readonly socket: net.Socket) {}

  queue(b: Buffer): void {
    if (this.socket.destroyed) return;
    this.out.push(b);
    if (!this.flushQueued) {
      this.flushQueued = true;
      queueMicrotask(() => this.flush());
    }
  }

  /**
   * Frames that ride with the next write, ahead of what it carries, or leave alone after
   * `maxWaitMs`: what the connection holds back so as not to wake the client for them alone.
   */
  hold(frames: Buffer[], maxWaitMs: number): void {
    if (this.socket.destroyed) return;
    this.out.unshift(...frames);
    if (!this.heldTimer && !this.flushQueued) this.heldTimer = setTimeout(() => this.flush(), maxWaitMs).unref();
  }

  /** What is queued, written now (before the socket is ended). */
  flush(): void {
    this.flushQueued = false;
    if (this.heldTimer) {
      clearTimeout(this.heldTimer);
      this.heldTimer = undefined;
    }
    if (!this.out.length || this.socket.destroyed) return;
    const chunk = this.out.length === 1 ? this.out[0] : Buffer.concat(this.out);
    this.out = [];
    this.socket.write(chunk);
    // A client that opens large windows and never reads would have us buffer without end.
    if (this.socket.writableLength > MAX_UNREAD) this.socket.destroy();
  }
}
