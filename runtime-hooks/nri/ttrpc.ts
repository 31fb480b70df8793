// A ttrpc endpoint over one byte stream: answers requests with a handler (server role) and
// sends requests with call() (client role). Frame: uint32 BE payload length, uint32 BE stream
// id, uint8 type (1 request, 2 response), uint8 flags; payloads are ttrpc.Request/Response.
import protobuf from 'protobufjs';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';

const HEADER = 10;
const MAX_MESSAGE = 4 << 20;
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

export class TtrpcEndpoint {
  private buf: Buffer = Buffer.alloc(0);
  private nextStream = 1;
  private readonly pending = new Map<number, { resolve: (b: Buffer) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();

  constructor(private readonly stream: ByteStream, private readonly handler?: Handler) {
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
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    while (this.buf.length >= HEADER) {
      const len = this.buf.readUInt32BE(0);
      if (len > MAX_MESSAGE) throw new TtrpcError(STATUS.RESOURCE_EXHAUSTED, `ttrpc message of ${len} bytes is too large`);
      if (this.buf.length < HEADER + len) return;
      const streamId = this.buf.readUInt32BE(4);
      const type = this.buf.readUInt8(8);
      const body = Buffer.from(this.buf.subarray(HEADER, HEADER + len));
      this.buf = this.buf.subarray(HEADER + len);
      if (type === TYPE_REQUEST) void this.serve(streamId, body);
      else if (type === TYPE_RESPONSE) this.settle(streamId, body);
    }
  }

  private settle(streamId: number, body: Buffer): void {
    const p = this.pending.get(streamId);
    if (!p) return;
    this.pending.delete(streamId);
    clearTimeout(p.timer);
    const res = ResponseT.toObject(ResponseT.decode(body), { defaults: true }) as { status?: { code: number; message: string }; payload: Uint8Array };
    if (res.status && res.status.code !== STATUS.OK) p.reject(new TtrpcError(res.status.code, res.status.message));
    else p.resolve(Buffer.from(res.payload));
  }

  private async serve(streamId: number, body: Buffer): Promise<void> {
    let status: { code: number; message: string } = { code: STATUS.OK, message: "" };
    let payload: Buffer = Buffer.alloc(0);
    try {
      const req = RequestT.toObject(RequestT.decode(body), { defaults: true }) as { service: string; method: string; payload: Uint8Array };
      if (!this.handler) throw new TtrpcError(STATUS.UNIMPLEMENTED, `${req.service}/${req.method} is not served here`);
      payload = await this.handler(req.service, req.method, Buffer.from(req.payload));
    } catch (e) {
      status = e instanceof TtrpcError ? { code: e.code, message: e.message } : { code: STATUS.INTERNAL, message: (e as Error).message ?? String(e) };
    }
    const res = ResponseT.encode(ResponseT.create(status.code === STATUS.OK ? { payload } : { status })).finish();
    this.send(streamId, TYPE_RESPONSE, Buffer.from(res));
  }
}
