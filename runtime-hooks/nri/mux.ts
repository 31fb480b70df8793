// NRI's connection multiplexer: several logical byte streams over one unix socket. Each frame
// is uint32 BE conn id, uint32 BE payload length, payload. Conn id 0 is reserved; a conn
// exists as soon as either side writes to it (opening sends nothing).
import { EventEmitter } from 'node:events';
import { Duplex } from 'node:stream';
import { ByteQueue } from '../wire/byte-queue';

const HEADER = 8;
/** Frames written are at most 4096 bytes, header included. */
export const MAX_FRAME = 4096;
const MAX_READ_PAYLOAD = 4 << 20;
const FRAMES_PER_TURN = 16_384;

export class MuxConn extends EventEmitter {
  constructor(private readonly mux: Mux, readonly id: number) {
    super();
  }
  write(data: Buffer): void {
    this.mux.write(this.id, data);
  }
}

/**
 * Only the conns this side opened with conn() receive data: frames for any other id are read
 * and dropped, so a peer cannot make us keep state per id it invents.
 */
export class Mux extends EventEmitter {
  private readonly conns = new Map<number, MuxConn>();
  private readonly queue = new ByteQueue();
  /** Frames dropped because their conn id was not opened here. */
  dropped = 0;

  constructor(private readonly sock: Duplex) {
    super();
    sock.on('data', (chunk: Buffer) => this.onData(chunk));
    sock.on('close', () => this.emit('close'));
    sock.on('error', (e) => this.emit('error', e));
  }

  conn(id: number): MuxConn {
    if (id === 0) throw new Error('multiplexer conn id 0 is reserved');
    let c = this.conns.get(id);
    if (!c) {
      c = new MuxConn(this, id);
      this.conns.set(id, c);
    }
    return c;
  }

  write(id: number, data: Buffer): void {
    for (let o = 0; o < data.length || (o === 0 && data.length === 0); o += MAX_FRAME - HEADER) {
      const part = data.subarray(o, o + MAX_FRAME - HEADER);
      const h = Buffer.alloc(HEADER);
      h.writeUInt32BE(id, 0);
      h.writeUInt32BE(part.length, 4);
      this.sock.write(Buffer.concat([h, part]));
      if (data.length === 0) break;
    }
  }

  close(): void {
    this.sock.destroy();
  }

  private onData(chunk: Buffer): void {
    this.queue.push(chunk);
    if (!this.yielded) this.read();
  }

  /** A turn's reading stopped at FRAMES_PER_TURN, and goes on at the next (setImmediate). */
  private yielded = false;

  /**
   * The whole frames queued, FRAMES_PER_TURN at most in one turn of the event loop: a peer
   * flooding the socket with frames (for conns never opened: read and dropped without a copy)
   * cannot hold the event loop, whose other callers (gRPC, CNI) go on between turns, and the
   * flood is gone through in tens of ms (200 000 frames), well within NRI's 2 s request timeout.
   */
  private read(): void {
    this.yielded = false;
    let budget = FRAMES_PER_TURN;
    while (this.queue.length >= HEADER) {
      if (budget-- === 0) {
        this.yielded = true;
        setImmediate(() => this.read());
        return;
      }
      const id = this.queue.u32(0);
      const len = this.queue.u32(4);
      if (len > MAX_READ_PAYLOAD) {
        this.queue.clear();
        this.emit('error', new Error(`multiplexer frame of ${len} bytes is larger than ${MAX_READ_PAYLOAD}`));
        this.sock.destroy();
        return;
      }
      if (this.queue.length < HEADER + len) return;
      const conn = this.conns.get(id);
      if (!conn) {
        this.queue.skip(HEADER + len);
        this.dropped++;
        continue;
      }
      const payload = this.queue.take(HEADER + len).subarray(HEADER);
      try {
        conn.emit('data', payload);
      } catch (e) {
        // What a conn's reader cannot take costs this connection, never the process.
        this.queue.clear();
        this.emit('error', e);
        this.sock.destroy();
        return;
      }
    }
  }
}
