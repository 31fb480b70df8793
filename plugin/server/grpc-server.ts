// gRPC over kni's own HTTP/2 connections (./http2): the calls of the services grpc-js defines
// (unary and server-streaming; kni serves no client streams), their handlers called as grpc-js
// calls them, and answers as the gRPC wire protocol wants them: a 5-byte prefix per message,
// the status in trailers, or alone in a trailers-only answer when the call failed.
import * as grpc from '@grpc/grpc-js';
import { EventEmitter } from 'node:events';
import net from 'node:net';
import { H2Connection, H2Limits } from './http2/connection';
import { H2_ERROR } from './http2/frames';
import { HeaderList } from './http2/hpack';
import { H2Stream } from './http2/stream';

/** The largest request message, as grpc-js's default receive limit. */
export const MAX_REQUEST_MESSAGE = 4 << 20;
// Frozen: each call's are the same bytes, encoded once (hpack.ts).
const ANSWER_HEADERS = Object.freeze([[':status', '200'], ['content-type', 'application/grpc']]) as HeaderList;
const OK_TRAILERS = Object.freeze([['grpc-status', '0']]) as HeaderList;
const TIMEOUT_UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

type Method = grpc.MethodDefinition<unknown, unknown>;
interface Status { code: number; details: string }

/** grpc-message: UTF-8, each byte outside printable ASCII, and '%', as %XX. */
export function percentEncode(s: string): string {
  if (/^[\x20-\x24\x26-\x7e]*$/.test(s)) return s;
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) out += b >= 0x20 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  return out;
}

function prefixed(message: Buffer): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  message.copy(out, 5);
  return out;
}

function statusOf(e: unknown): Status {
  const err = e as { code?: unknown; details?: unknown; message?: unknown } | null;
  const code = typeof err?.code === 'number' && err.code >= 0 && err.code <= 16 ? err.code : grpc.status.UNKNOWN;
  return { code, details: String(err?.details ?? err?.message ?? e ?? '') };
}

/** Ends a call with a failure: in trailers when the answer has begun, else trailers-only. */
function endWith(s: H2Stream, status: Status): void {
  const fields: HeaderList = [['grpc-status', String(status.code)]];
  if (status.details) fields.push(['grpc-message', percentEncode(status.details)]);
  if (s.headersSent) s.end(fields);
  else s.respond([...ANSWER_HEADERS, ...fields], true);
}

/** What a server stream's answer may hold waiting for the client to read before write() says wait: grpc-js's default. */
const STREAM_HIGH_WATER = 64 * 1024;

/** What a server-streaming handler writes to, shaped as grpc-js's ServerWritableStream as kni uses it. */
class ServerStreamCall extends EventEmitter {
  cancelled = false;
  private done = false;

  constructor(readonly request: unknown, private readonly s: H2Stream, private readonly method: Method) {
    super();
    // grpc-js ends a server stream with a status when the handler emits an error carrying one.
    this.on('error', (e: unknown) => this.finish(statusOf(e)));
  }

  get writableLength(): number {
    return this.s.pendingBytes;
  }

  /** Which connection the call came on ("unix:<n>"): kni's callers all come over one socket. */
  getPeer(): string {
    return `unix:${this.s.connection}`;
  }

  /**
   * As a Node writable: false once STREAM_HIGH_WATER bytes wait for the peer's flow control,
   * then 'drain' when they have gone (a reader that does not read holds at most that much).
   */
  write(message: unknown): boolean {
    if (this.done) return false;
    this.s.write(prefixed(this.method.responseSerialize(message)));
    if (this.s.pendingBytes < STREAM_HIGH_WATER) return true;
    this.full = true;
    return false;
  }

  private full = false;

  /** The stream's data has all gone out. */
  drained(): void {
    if (!this.full || this.done) return;
    this.full = false;
    this.emit('drain');
  }

  end(): void {
    this.finish({ code: grpc.status.OK, details: '' });
  }

  finish(status: Status): void {
    if (this.done) return;
    this.done = true;
    if (status.code === grpc.status.OK) this.s.end(OK_TRAILERS);
    else endWith(this.s, status);
    this.emit('finish');
  }

  /** The client went away, or the deadline passed. */
  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.done = true;
    this.emit('cancelled', 'cancelled');
  }
}

export class GrpcServer {
  private readonly methods = new Map<string, { def: Method; handler: (...args: unknown[]) => void }>();
  private readonly connections = new Set<H2Connection>();
  private readonly streamCalls = new Set<ServerStreamCall>();
  private onIdle: (() => void) | undefined;

  constructor(private readonly limits: H2Limits, private readonly onProtocolError: (message: string) => void = () => undefined) {}

  addService(def: grpc.ServiceDefinition, impl: grpc.UntypedServiceImplementation): void {
    for (const [name, m] of Object.entries(def) as [string, Method & { originalName?: string }][]) {
      if (m.requestStream) throw new Error(`${m.path}: kni's gRPC server serves unary and server-streaming methods only`);
      const handler = (impl[name] ?? (m.originalName ? impl[m.originalName] : undefined)) as ((...args: unknown[]) => void) | undefined;
      if (handler) this.methods.set(m.path, { def: m, handler });
    }
  }

  /** Serves one accepted socket. */
  accept(sock: net.Socket): void {
    const c = new H2Connection(sock, (s) => this.call(s), this.limits, this.onProtocolError);
    this.connections.add(c);
    c.onClose = () => {
      this.connections.delete(c);
      if (this.onIdle && !this.connections.size) this.onIdle();
    };
    if (this.onIdle) c.goaway(H2_ERROR.NO_ERROR, 'shutting down');
  }

  /**
   * Every connection is asked to go away; calls in flight finish, Watch streams end with
   * UNAVAILABLE (their clients resume elsewhere); `done` once every connection is closed.
   */
  shutdown(done: () => void): void {
    let called = false;
    this.onIdle = () => {
      if (!called) done();
      called = true;
    };
    for (const call of [...this.streamCalls]) call.finish({ code: grpc.status.UNAVAILABLE, details: 'kni is shutting down' });
    for (const c of this.connections) c.goaway(H2_ERROR.NO_ERROR, 'shutting down');
    if (!this.connections.size) this.onIdle();
  }

  private call(s: H2Stream): void {
    if (s.header(':method') !== 'POST') return s.respond([[':status', '405']], true);
    if (!(s.header('content-type') ?? '').startsWith('application/grpc')) return s.respond([[':status', '415']], true);
    const path = s.header(':path') ?? '';
    const m = this.methods.get(path);
    if (!m) return endWith(s, { code: grpc.status.UNIMPLEMENTED, details: `kni does not serve ${path.slice(0, 200)}` });
    const parts: Buffer[] = [];
    let size = 0;
    let refused = false;
    s.onData = (chunk) => {
      if (refused) return;
      size += chunk.length;
      if (size > MAX_REQUEST_MESSAGE + 5) {
        refused = true;
        endWith(s, { code: grpc.status.RESOURCE_EXHAUSTED, details: `request message larger than ${MAX_REQUEST_MESSAGE} bytes` });
        return;
      }
      parts.push(chunk);
    };
    s.onEnd = () => {
      if (refused) return;
      const body = parts.length === 1 ? parts[0] : Buffer.concat(parts);
      const message = this.oneMessage(s, body);
      if (!message) return;
      let request: unknown;
      try {
        request = m.def.requestDeserialize(message);
      } catch (e) {
        return endWith(s, { code: grpc.status.INTERNAL, details: `request does not decode: ${(e as Error)?.message ?? e}` });
      }
      if (m.def.responseStream) this.serverStream(s, m.def, m.handler, request);
      else this.unary(s, m.def, m.handler, request);
    };
  }

  /** The request's one message (unary and server-streaming calls carry exactly one). */
  private oneMessage(s: H2Stream, body: Buffer): Buffer | undefined {
    if (body.length < 5 || body.readUInt32BE(1) !== body.length - 5) {
      endWith(s, { code: grpc.status.INTERNAL, details: `expected one request message, got ${body.length} bytes that are not exactly one` });
      return undefined;
    }
    if (body[0] !== 0) {
      const encoding = s.header('grpc-encoding') ?? 'identity';
      endWith(s, { code: grpc.status.UNIMPLEMENTED, details: `compressed requests are not accepted (grpc-encoding ${encoding.slice(0, 40)})` });
      return undefined;
    }
    return body.subarray(5);
  }

  /** The call's deadline from grpc-timeout, as a timer that ends it; undefined without one. */
  private deadline(s: H2Stream, expire: () => void): NodeJS.Timeout | undefined {
    const t = /^(\d{1,8})([HMSmun])$/.exec(s.header('grpc-timeout') ?? '');
    if (!t) return undefined;
    return setTimeout(expire, Math.max(0, Number(t[1]) * TIMEOUT_UNIT_MS[t[2]])).unref();
  }

  private unary(s: H2Stream, def: Method, handler: (...args: unknown[]) => void, request: unknown): void {
    let done = false;
    // kni's handlers read only the request: the metadata object is made if one asks for it.
    const call = { request, cancelled: false, get metadata() { return new grpc.Metadata(); }, getPeer: () => `unix:${s.connection}`, getPath: () => def.path };
    const timer = this.deadline(s, () => {
      if (done) return;
      done = true;
      call.cancelled = true;
      endWith(s, { code: grpc.status.DEADLINE_EXCEEDED, details: 'deadline exceeded' });
    });
    s.onClose = (aborted) => {
      if (aborted) call.cancelled = true;
    };
    const answer = (err: unknown, res?: unknown): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (err) return endWith(s, statusOf(err));
      let bytes: Buffer;
      try {
        bytes = def.responseSerialize(res);
      } catch (e) {
        return endWith(s, { code: grpc.status.INTERNAL, details: `answer does not encode: ${(e as Error)?.message ?? e}` });
      }
      s.respond(ANSWER_HEADERS);
      s.write(prefixed(bytes));
      s.end(OK_TRAILERS);
    };
    try {
      handler(call, answer);
    } catch (e) {
      answer({ code: grpc.status.UNKNOWN, details: String((e as Error)?.message ?? e) });
    }
  }

  private serverStream(s: H2Stream, def: Method, handler: (...args: unknown[]) => void, request: unknown): void {
    const call = new ServerStreamCall(request, s, def);
    s.onDrain = () => call.drained();
    this.streamCalls.add(call);
    // Headers at once: a client waiting for the stream's start sees it before the first message.
    s.respond(ANSWER_HEADERS);
    const timer = this.deadline(s, () => {
      call.finish({ code: grpc.status.DEADLINE_EXCEEDED, details: 'deadline exceeded' });
      call.cancel();
    });
    s.onClose = (aborted) => {
      clearTimeout(timer);
      this.streamCalls.delete(call);
      if (aborted) call.cancel();
      call.emit('close');
    };
    try {
      handler(call);
    } catch (e) {
      call.finish({ code: grpc.status.UNKNOWN, details: String((e as Error)?.message ?? e) });
    }
  }
}
