// The server side of one HTTP/2 connection (RFC 9113) over a unix socket, as much as gRPC
// needs: streams opened by the client, flow control both ways, SETTINGS, PING, GOAWAY,
// RST_STREAM. No push, no priorities (ignored, as the RFC allows).
//
// Why not Node's http2 module: a no-op gRPC call from grpc-go, 4 ms after the last, took 0.49 ms
// p50 against a bare node:http2 server and 0.21–0.30 ms against frames written by hand (grpc-js
// on node:http2: 0.51–0.76 ms); Node's stream plumbing and its trailers' extra event-loop turn
// are most of a call's transport (docs/performance-rounds.md, thirteenth round). Here an answer's
// HEADERS, DATA and trailers leave in one write.
import net from 'node:net';
import { HpackDecoder, HpackError, HeaderList, encodeHeaders } from './hpack';
import { HuffmanError } from './huffman';
import {
  DEFAULT_MAX_FRAME, DEFAULT_WINDOW, FLAG, FRAME, H2_ERROR, MAX_WINDOW, SETTING,
  ConnectionError, frame, goawayPayload, settingsPayload, u32, unpad,
} from './frames';
import { FrameReader } from './frame-reader';
import { FrameWriter } from './frame-writer';
import { H2Stream, StreamSink } from './stream';

export interface H2Limits {
  /** The client's preface must have come within this time. */
  handshakeMs: number;
  /** No stream open this long: GOAWAY, then closed (clients reconnect on their own). */
  idleMs: number;
  /** GOAWAY after this, closed after the grace: what bounds a connection held open for ever. */
  maxAgeMs: number;
  maxAgeGraceMs: number;
  maxConcurrentStreams: number;
  /** Names, values and 32 per field, as SETTINGS_MAX_HEADER_LIST_SIZE counts them. */
  maxHeaderListSize: number;
}

/** What this end announces: a stream may receive 1 MiB before its first WINDOW_UPDATE. */
const STREAM_WINDOW = 1 << 20;
const CONNECTION_WINDOW = 16 << 20;
/**
 * How long a PING's ack may wait for an answer to ride with. grpc-go pings after each answer it
 * reads (its BDP estimate), so the ping comes in with the client's next request; acked alone,
 * it woke the client in the middle of the call for 17 bytes. Riding with the answer, a Go
 * client's Attach: its overhead over the attach 22 µs lower (lower in 33 of 40 rounds), the
 * attach 16 µs (docs/performance-rounds.md, seventeenth round). A slower answer releases the ack after
 * this; keepalive and BDP pings are timed in seconds and in whole round trips, which a few ms
 * do not disturb.
 */
const PING_ACK_HOLD_MS = 5;
/** A header block (HEADERS and its CONTINUATIONs) larger than this ends the connection. */
const MAX_HEADER_BLOCK = 256 << 10;

let connectionNumbers = 0;

export class H2Connection implements StreamSink {
  private readonly reader: FrameReader;
  private readonly writer: FrameWriter;
  private prefaceSent = false;
  private readonly streams = new Map<number, H2Stream>();
  private lastStreamId = 0;
  private readonly decoder = new HpackDecoder();
  /** A header block being assembled: its stream, END_STREAM, and its fragments so far. */
  private continuing: { id: number; endStream: boolean; parts: Buffer[]; size: number } | undefined;
  private sendWindow = DEFAULT_WINDOW;
  private peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxFrame = DEFAULT_MAX_FRAME;
  /** The peer changed its table size: the next block we send starts with a size update to 0. */
  private tableSizeUpdate = false;
  private recvUnacked = 0;
  private readonly blocked = new Set<H2Stream>();
  private draining = false;
  private ended = false;
  /** PING acks of the read being handled: sent with the answer when a call is open. */
  private pingAcks: Buffer[] = [];
  private readonly timers: { handshake?: NodeJS.Timeout; idle?: NodeJS.Timeout; age?: NodeJS.Timeout; grace?: NodeJS.Timeout } = {};
  onClose: () => void = () => undefined;
  /** A number of its own among the server's connections (a call's peer). */
  readonly number = ++connectionNumbers;

  constructor(
    private readonly socket: net.Socket,
    private readonly onStream: (s: H2Stream) => void,
    private readonly limits: H2Limits,
    private readonly onProtocolError: (message: string) => void = () => undefined,
  ) {
    socket.setNoDelay(true);
    this.reader = new FrameReader(() => {
      clearTimeout(this.timers.handshake);
      this.serverPreface();
    }, (type, flags, id, payload) => this.handle(type, flags, id, payload));
    this.writer = new FrameWriter(socket);
    socket.on('data', (d: Buffer) => this.receive(d));
    socket.on('error', () => undefined);
    socket.on('close', () => this.closed());
    this.timers.handshake = setTimeout(() => socket.destroy(), limits.handshakeMs).unref();
    this.timers.age = setTimeout(() => {
      this.goaway(H2_ERROR.NO_ERROR, 'max connection age');
      this.timers.grace = setTimeout(() => socket.destroy(), limits.maxAgeGraceMs).unref();
    }, limits.maxAgeMs).unref();
    this.armIdle();
  }

  /** Sent once the client has spoken: a silent connection is closed without a byte. */
  private serverPreface(): void {
    this.prefaceSent = true;
    this.queue(frame(FRAME.SETTINGS, 0, 0, settingsPayload([
      [SETTING.MAX_CONCURRENT_STREAMS, this.limits.maxConcurrentStreams],
      [SETTING.INITIAL_WINDOW_SIZE, STREAM_WINDOW],
      [SETTING.MAX_HEADER_LIST_SIZE, this.limits.maxHeaderListSize],
      [SETTING.ENABLE_PUSH, 0],
    ])));
    this.queue(frame(FRAME.WINDOW_UPDATE, 0, 0, u32(CONNECTION_WINDOW - DEFAULT_WINDOW)));
  }

  /** No new streams; the connection closes once those open are done. */
  goaway(code: number, debug = ''): void {
    if (this.draining || this.ended) return;
    if (!this.prefaceSent) return this.destroy(); // nothing may precede our SETTINGS
    this.draining = true;
    this.queue(frame(FRAME.GOAWAY, 0, 0, goawayPayload(this.lastStreamId, code, debug)));
    if (!this.streams.size || code !== H2_ERROR.NO_ERROR) this.finish();
  }

  private destroy(): void {
    this.socket.destroy();
  }

  private receive(d: Buffer): void {
    if (this.ended) return;
    try {
      this.reader.push(d);
      if (this.pingAcks.length) this.sendPingAcks();
    } catch (e) {
      if (e instanceof ConnectionError) this.fail(e.code, e.message);
      else if (e instanceof HpackError || e instanceof HuffmanError) this.fail(H2_ERROR.COMPRESSION_ERROR, e.message);
      else this.fail(H2_ERROR.INTERNAL_ERROR, `internal error: ${String((e as Error)?.stack ?? e)}`);
    }
  }

  private sendPingAcks(): void {
    const acks = this.pingAcks;
    this.pingAcks = [];
    if (this.streams.size) this.writer.hold(acks, PING_ACK_HOLD_MS);
    else for (const a of acks) this.queue(a);
  }

  private handle(type: number, flags: number, id: number, p: Buffer): void {
    if (this.continuing && type !== FRAME.CONTINUATION) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'a header block interrupted by another frame');
    switch (type) {
      case FRAME.DATA: return this.onDataFrame(flags, id, p);
      case FRAME.HEADERS: return this.onHeadersFrame(flags, id, p);
      case FRAME.CONTINUATION: {
        const c = this.continuing;
        if (!c || c.id !== id) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'CONTINUATION without a header block');
        return this.addFragment(c, p, flags);
      }
      case FRAME.SETTINGS: return this.onSettings(flags, id, p);
      case FRAME.PING:
        if (id) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'PING on a stream');
        if (p.length !== 8) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, 'PING not 8 bytes');
        if (!(flags & FLAG.ACK)) this.pingAcks.push(frame(FRAME.PING, FLAG.ACK, 0, Buffer.from(p)));
        return;
      case FRAME.GOAWAY:
        this.draining = true;
        if (!this.streams.size) this.finish();
        return;
      case FRAME.RST_STREAM: {
        if (!id || p.length !== 4) throw new ConnectionError(id ? H2_ERROR.FRAME_SIZE_ERROR : H2_ERROR.PROTOCOL_ERROR, 'bad RST_STREAM');
        const s = this.streams.get(id);
        if (s) this.close(s, true);
        return;
      }
      case FRAME.WINDOW_UPDATE: return this.onWindowUpdate(id, p);
      case FRAME.PRIORITY:
        if (p.length !== 5) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, 'PRIORITY not 5 bytes');
        return;
      case FRAME.PUSH_PROMISE: throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'PUSH_PROMISE from a client');
      default: return; // unknown frame types are ignored (RFC 9113 §4.1)
    }
  }

  private onHeadersFrame(flags: number, id: number, p: Buffer): void {
    if (!id) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'HEADERS on stream 0');
    const c = { id, endStream: (flags & FLAG.END_STREAM) !== 0, parts: [] as Buffer[], size: 0 };
    this.addFragment(c, unpad(flags, p, (flags & FLAG.PRIORITY) !== 0), flags);
  }

  private addFragment(c: NonNullable<H2Connection['continuing']>, fragment: Buffer, flags: number): void {
    c.parts.push(fragment);
    c.size += fragment.length;
    if (c.size > MAX_HEADER_BLOCK) throw new ConnectionError(H2_ERROR.ENHANCE_YOUR_CALM, `header block over ${MAX_HEADER_BLOCK} bytes`);
    if (!(flags & FLAG.END_HEADERS)) {
      this.continuing = c;
      return;
    }
    this.continuing = undefined;
    const block = c.parts.length === 1 ? c.parts[0] : Buffer.concat(c.parts);
    // Decoded whatever happens next: the table must stay in step with the client's.
    const { headers, oversized } = this.decoder.decode(block, this.limits.maxHeaderListSize);
    this.onHeaderBlock(c.id, c.endStream, headers, oversized);
  }

  private onHeaderBlock(id: number, endStream: boolean, headers: HeaderList, oversized: boolean): void {
    const existing = this.streams.get(id);
    if (existing) {
      // Trailers from the client: only an end is meaningful to gRPC.
      if (!endStream) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'a second header block without END_STREAM');
      return this.remoteEnd(existing);
    }
    if (id % 2 === 0 || id <= this.lastStreamId) {
      if (id % 2 === 0) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, `stream ${id} is not a client's`);
      return; // trailers of a stream already answered or reset
    }
    this.lastStreamId = id;
    if (this.draining || this.streams.size >= this.limits.maxConcurrentStreams) {
      this.queue(frame(FRAME.RST_STREAM, 0, id, u32(H2_ERROR.REFUSED_STREAM)));
      return;
    }
    if (oversized) {
      // Answered as an HTTP error without the fields read: 431 (RFC 6585).
      this.queue(frame(FRAME.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, id, this.headerBlock([[':status', '431']])));
      if (!endStream) this.queue(frame(FRAME.RST_STREAM, 0, id, u32(H2_ERROR.NO_ERROR)));
      return;
    }
    const s = new H2Stream(id, headers, this, this.peerInitialWindow, this.number);
    this.streams.set(id, s);
    clearTimeout(this.timers.idle);
    this.onStream(s);
    if (endStream) this.remoteEnd(s);
  }

  private onDataFrame(flags: number, id: number, p: Buffer): void {
    if (!id) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'DATA on stream 0');
    // Every byte counts against the windows, padding too; the connection's is given back in bulk.
    this.recvUnacked += p.length;
    if (this.recvUnacked >= CONNECTION_WINDOW / 2) {
      this.queue(frame(FRAME.WINDOW_UPDATE, 0, 0, u32(this.recvUnacked)));
      this.recvUnacked = 0;
    }
    const s = this.streams.get(id);
    if (!s) {
      if (id > this.lastStreamId) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, `DATA on idle stream ${id}`);
      return; // a stream already answered or reset: what the client sent before it knew is dropped
    }
    if (s.remoteEnded) return this.resetStream(s, H2_ERROR.STREAM_CLOSED);
    const data = unpad(flags, p, false);
    if (!(flags & FLAG.END_STREAM)) {
      s.unacked += p.length;
      if (s.unacked >= STREAM_WINDOW / 2) {
        this.queue(frame(FRAME.WINDOW_UPDATE, 0, id, u32(s.unacked)));
        s.unacked = 0;
      }
    }
    if (data.length) s.onData(data);
    if (flags & FLAG.END_STREAM && !s.closed) this.remoteEnd(s);
  }

  private onSettings(flags: number, id: number, p: Buffer): void {
    if (id) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'SETTINGS on a stream');
    if (flags & FLAG.ACK) {
      if (p.length) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, 'SETTINGS ack with a payload');
      return;
    }
    if (p.length % 6) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, 'SETTINGS not a multiple of 6 bytes');
    for (let at = 0; at < p.length; at += 6) {
      const key = p.readUInt16BE(at);
      const v = p.readUInt32BE(at + 2);
      if (key === SETTING.INITIAL_WINDOW_SIZE) {
        if (v > MAX_WINDOW) throw new ConnectionError(H2_ERROR.FLOW_CONTROL_ERROR, 'initial window above 2^31-1');
        const delta = v - this.peerInitialWindow;
        this.peerInitialWindow = v;
        for (const s of this.streams.values()) s.sendWindow += delta;
      } else if (key === SETTING.MAX_FRAME_SIZE) {
        if (v < DEFAULT_MAX_FRAME || v > 0xffffff) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, `max frame size ${v} out of range`);
        this.peerMaxFrame = v;
      } else if (key === SETTING.HEADER_TABLE_SIZE) {
        this.tableSizeUpdate = true;
      } else if (key === SETTING.ENABLE_PUSH && v > 1) {
        throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'ENABLE_PUSH neither 0 nor 1');
      }
    }
    this.queue(frame(FRAME.SETTINGS, FLAG.ACK, 0));
    for (const s of [...this.blocked]) this.pump(s);
  }

  private onWindowUpdate(id: number, p: Buffer): void {
    if (p.length !== 4) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, 'WINDOW_UPDATE not 4 bytes');
    const inc = p.readUInt32BE(0) & 0x7fffffff;
    if (!id) {
      if (!inc) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
      this.sendWindow += inc;
      if (this.sendWindow > MAX_WINDOW) throw new ConnectionError(H2_ERROR.FLOW_CONTROL_ERROR, 'connection window above 2^31-1');
      for (const s of [...this.blocked]) this.pump(s);
      return;
    }
    const s = this.streams.get(id);
    if (!s) return; // a stream just closed: its update is late, not wrong
    if (!inc || s.sendWindow + inc > MAX_WINDOW) return this.resetStream(s, inc ? H2_ERROR.FLOW_CONTROL_ERROR : H2_ERROR.PROTOCOL_ERROR);
    s.sendWindow += inc;
    this.pump(s);
  }

  private remoteEnd(s: H2Stream): void {
    s.remoteEnded = true;
    if (s.localEnded) this.close(s, false);
    else s.onEnd();
  }

  private headerBlock(headers: HeaderList): Buffer {
    const block = encodeHeaders(headers);
    if (!this.tableSizeUpdate) return block;
    this.tableSizeUpdate = false;
    return Buffer.concat([Buffer.from([0x20]), block]);
  }

  sendHeaders(s: H2Stream, headers: HeaderList, endStream: boolean): void {
    // kni's header blocks are a few dozen bytes: one frame, no CONTINUATION.
    this.queue(frame(FRAME.HEADERS, FLAG.END_HEADERS | (endStream ? FLAG.END_STREAM : 0), s.id, this.headerBlock(headers)));
    if (endStream) this.localEnd(s);
  }

  /** Sends what the windows allow of a stream's data, then its trailers once the data is out. */
  pump(s: H2Stream): void {
    if (s.closed) return;
    while (s.pending.length) {
      const room = Math.min(this.sendWindow, s.sendWindow, this.peerMaxFrame);
      if (room <= 0) {
        this.blocked.add(s);
        return;
      }
      const head = s.pending[0];
      const n = Math.min(room, head.length);
      const piece = n === head.length ? head : head.subarray(0, n);
      if (n === head.length) s.pending.shift();
      else s.pending[0] = head.subarray(n);
      s.pendingBytes -= n;
      this.sendWindow -= n;
      s.sendWindow -= n;
      this.queue(frame(FRAME.DATA, 0, s.id, piece));
    }
    this.blocked.delete(s);
    s.onDrain();
    if (s.trailers) {
      const t = s.trailers;
      s.trailers = undefined;
      this.sendHeaders(s, t, true);
    }
  }

  resetStream(s: H2Stream, code: number): void {
    this.queue(frame(FRAME.RST_STREAM, 0, s.id, u32(code)));
    this.close(s, true);
  }

  private localEnd(s: H2Stream): void {
    s.localEnded = true;
    if (s.remoteEnded) return this.close(s, false);
    // Answered before the request ended: the client may stop sending (RFC 9113 §8.1).
    this.queue(frame(FRAME.RST_STREAM, 0, s.id, u32(H2_ERROR.NO_ERROR)));
    this.close(s, false);
  }

  private close(s: H2Stream, aborted: boolean): void {
    if (s.closed) return;
    s.closed = true;
    this.streams.delete(s.id);
    this.blocked.delete(s);
    s.onClose(aborted);
    if (this.streams.size) return;
    if (this.draining) this.finish();
    else this.armIdle();
  }

  private armIdle(): void {
    clearTimeout(this.timers.idle);
    this.timers.idle = setTimeout(() => this.goaway(H2_ERROR.NO_ERROR, 'idle'), this.limits.idleMs).unref();
  }

  private fail(code: number, message: string): void {
    this.onProtocolError(message);
    if (!this.prefaceSent) this.serverPreface(); // a client that got the preface wrong is told why
    this.goaway(code, message.split('\n')[0].slice(0, 200)); // the stack, if any, only in the log
    this.finish();
  }

  /** Sends what is queued, then closes the socket. */
  private finish(): void {
    if (this.ended) return;
    this.ended = true;
    this.reader.stop();
    this.writer.flush();
    this.socket.end();
    setTimeout(() => this.socket.destroy(), 1000).unref();
  }

  private queue(b: Buffer): void {
    this.writer.queue(b);
  }

  private closed(): void {
    for (const t of Object.values(this.timers)) clearTimeout(t);
    this.ended = true;
    this.reader.stop();
    for (const s of [...this.streams.values()]) this.close(s, true);
    this.onClose();
  }
}
