// A ttrpc endpoint over one byte stream: answers requests with a handler (server role) and
// sends requests with call() (client role). Frame: uint32 BE payload length, uint32 BE stream
// id, uint8 type (1 request, 2 response), uint8 flags; payloads are ttrpc.Request/Response.
import protobuf from 'protobufjs';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';
import { ByteQueue } from '../wire/byte-queue';

const HEADER = 10;
const MAX_MESSAGE = 4 << 20;
/** Requests a peer may have us serve at once on one connection; more are refused at once. */
const MAX_IN_FLIGHT = 64;
const TYPE_REQUEST = 1;
const TYPE_RESPONSE = 2;

export const STATUS = { OK: 0, CANCELLED: 1, UNKNOWN: 2, INVALID_ARGUMENT: 3, DEADLINE_EXCEEDED: 4, NOT_FOUND: 5, ALREADY_EXISTS: 6, RESOURCE_EXHAUSTED: 8, FAILED_PRECONDITION: 9, INTERNAL: 13, UNAVAILABLE: 14, UNIMPLEMENTED: 12 } as const;

export class TtrpcError extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
  }
}

const root = protobuf.loadSync(path.join(packageRoot(), 'proto/nri/ttrpc.proto'));
const RequestT = root.lookupType('ttrpc.Request');
const ResponseT = root.lookupType('ttrpc.Response');

export interface ByteStream {
  write(data: Buffer): void;
  on(event: 'data', fn: (b: Buffer) => void): unknown;
}

export type Handler = (service: string, method: string, payload: Buffer) => Promise<Buffer>;

/**
 * Every byte from the peer is untrusted: a frame or message that does not decode is a
 * protocol error, reported once through onProtocolError (the owner closes the connection);
 * it is never thrown to the caller of write() or to the event loop.
 */
export class TtrpcEndpoint {
  private readonly queue = new ByteQueue();
  private nextStream = 1;
  private serving = 0;
  private broken = false;
  private readonly pending = new Map<number, { resolve: (b: Buffer) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();

  constructor(
    private readonly stream: ByteStream,
    private readonly handler?: Handler,
    private readonly onProtocolError: (e: Error) => void = () => undefined,
  ) {
    stream.on('data', (b) => this.onData(b));
  }

  call(service: string, method: string, payload: Uint8Array, timeoutMs: number): Promise<Buffer> {
    const id = this.nextStream;
    this.nextStream += 2;
    const body = Buffer.from(RequestT.encode(RequestT.create({ service, method, payload, timeoutNano: timeoutMs * 1e6 })).finish());
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new TtrpcError(STATUS.DEADLINE_EXCEEDED, `${service}/${method}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      this.send(id, TYPE_REQUEST, body);
    });
  }

  /** Fails every call still waiting (the connection is gone). */
  abort(reason: string): void {
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new TtrpcError(STATUS.UNAVAILABLE, reason));
      this.pending.delete(id);
    }
  }

  private send(streamId: number, type: number, body: Buffer): void {
    const h = Buffer.alloc(HEADER);
    h.writeUInt32BE(body.length, 0);
    h.writeUInt32BE(streamId, 4);
    h.writeUInt8(type, 8);
    this.stream.write(Buffer.concat([h, body]));
  }

  private onData(chunk: Buffer): void {
    if (this.broken) return;
    this.queue.push(chunk);
    try {
      while (this.queue.length >= HEADER) {
        const h = this.queue.peek(HEADER);
        const len = h.readUInt32BE(0);
        if (len > MAX_MESSAGE) throw new TtrpcError(STATUS.RESOURCE_EXHAUSTED, `ttrpc message of ${len} bytes is larger than ${MAX_MESSAGE}`);
        if (this.queue.length < HEADER + len) return;
        const streamId = h.readUInt32BE(4);
        const type = h.readUInt8(8);
        const body = this.queue.take(HEADER + len).subarray(HEADER);
        if (type === TYPE_REQUEST) this.accept(streamId, body);
        else if (type === TYPE_RESPONSE) this.settle(streamId, body);
      }
    } catch (e) {
      this.broken = true;
      this.queue.clear();
      const err = e instanceof Error ? e : new Error(String(e));
      this.abort(`ttrpc protocol error: ${err.message}`);
      this.onProtocolError(err);
    }
  }

  private accept(streamId: number, body: Buffer): void {
    if (this.serving >= MAX_IN_FLIGHT) {
      this.answer(streamId, { code: STATUS.RESOURCE_EXHAUSTED, message: `more than ${MAX_IN_FLIGHT} requests in flight on this connection` }, Buffer.alloc(0));
      return;
    }
    this.serving++;
    void this.serve(streamId, body).finally(() => this.serving--);
  }

  /** A response that does not decode fails its call and the connection (the peer is broken). */
  private settle(streamId: number, body: Buffer): void {
    const p = this.pending.get(streamId);
    if (!p) return;
    this.pending.delete(streamId);
    clearTimeout(p.timer);
    let res: { status?: { code: number; message: string }; payload: Uint8Array };
    try {
      res = ResponseT.toObject(ResponseT.decode(body), { defaults: true }) as typeof res;
    } catch (e) {
      const err = new TtrpcError(STATUS.INTERNAL, `malformed ttrpc response: ${(e as Error).message}`);
      p.reject(err);
      throw err;
    }
    if (res.status && res.status.code !== STATUS.OK) p.reject(new TtrpcError(res.status.code, res.status.message));
    else p.resolve(Buffer.from(res.payload));
  }

  private async serve(streamId: number, body: Buffer): Promise<void> {
    let status: { code: number; message: string } = { code: STATUS.OK, message: '' };
    let payload: Buffer = Buffer.alloc(0);
    try {
      let req: { service: string; method: string; payload: Uint8Array };
      try {
        req = RequestT.toObject(RequestT.decode(body), { defaults: true }) as typeof req;
      } catch (e) {
        throw new TtrpcError(STATUS.INVALID_ARGUMENT, `malformed ttrpc request: ${(e as Error).message}`);
      }
      if (!this.handler) throw new TtrpcError(STATUS.UNIMPLEMENTED, `${req.service}/${req.method} is not served here`);
      payload = await this.handler(req.service, req.method, Buffer.from(req.payload));
    } catch (e) {
      status = e instanceof TtrpcError ? { code: e.code, message: e.message } : { code: STATUS.INTERNAL, message: (e as Error)?.message ?? String(e) };
    }
    this.answer(streamId, status, payload);
  }

  private answer(streamId: number, status: { code: number; message: string }, payload: Buffer): void {
    if (this.broken) return;
    const res = ResponseT.encode(ResponseT.create(status.code === STATUS.OK ? { payload } : { status })).finish();
    this.send(streamId, TYPE_RESPONSE, Buffer.from(res));
  }
}
