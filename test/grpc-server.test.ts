// kni's gRPC server (plugin/server/server.ts: grpc-js on kni's own listener, with its bounds),
// against the clients that call it: grpc-js (the whole suite's) and grpc-go (containerd's), and
// random frames among calls. HTTP/2 conformance itself is h2spec's (h2spec.test.ts).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import path from 'node:path';
import { spawn } from 'node:child_process';
import * as grpc from '@grpc/grpc-js';
import fc from 'fast-check';
import { KniServer, serveGrpc } from '../plugin/server/server';
import { GO_CLIENT } from '../bench/go-client';
import { GRPC_TEST_LIMITS as LIMITS, socketDir } from './helpers/h2-test-server';

/** An HTTP/2 frame, written by hand: 24-bit length, type, flags, 31-bit stream id, payload. */
const frame = (type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer => {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h.writeUInt8(type, 3);
  h.writeUInt8(flags, 4);
  h.writeUInt32BE(stream & 0x7fffffff, 5);
  return Buffer.concat([h, payload]);
};
const FRAME = { DATA: 0, HEADERS: 1, SETTINGS: 4 };
const FLAG = { END_STREAM: 1, END_HEADERS: 4 };
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
/** A header block of literals without indexing (RFC 7541 6.2.2), no Huffman: names and values under 127 bytes. */
const encodeHeaders = (fields: [string, string][]): Buffer =>
  Buffer.concat(fields.flatMap(([n, v]) => [Buffer.from([0, n.length]), Buffer.from(n), Buffer.from([v.length]), Buffer.from(v)]));

const pass = (b: Buffer) => b;
const method = (name: string, responseStream = false): grpc.MethodDefinition<Buffer, Buffer> => ({
  path: `/test.Probe/${name}`, requestStream: false, responseStream, requestSerialize: pass, requestDeserialize: pass, responseSerialize: pass, responseDeserialize: pass,
});
const PROBE: grpc.ServiceDefinition = { Echo: method('Echo'), Fail: method('Fail'), Slow: method('Slow'), Stream: method('Stream', true) };

describe('gRPC server: calls', () => {
  const { dir, servers: sockets } = socketDir('kni-grpc-');

  let sock: string;
  let server: KniServer;
  let client: grpc.Client & Record<string, (...a: unknown[]) => unknown>;
  let shutdownStreamEnded: Promise<grpc.StatusObject> | undefined;
  let slowStarted: () => void = () => undefined;

  before(async () => {
    sock = path.join(dir, 'grpc.sock');
    server = await serveGrpc([{ definition: PROBE, handlers: {
      Echo: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb(null, call.request),
      Fail: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb({ code: grpc.status.FAILED_PRECONDITION, details: call.request.toString() }),
      Slow: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        slowStarted();
        setTimeout(() => cb(null, call.request), 300);
      },
      Stream: (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
        const n = call.request.readUInt32BE(0);
        for (let i = 0; i < n; i++) call.write(Buffer.alloc(1000, i % 256));
        if (n) call.end();
      },
    } }], sock, LIMITS);
    const Ctor = grpc.makeGenericClientConstructor(PROBE, 'Probe');
    client = new Ctor(`unix://${sock}`, grpc.credentials.createInsecure()) as typeof client;
  });
  after(() => client?.close());

  const unary = (name: string, req: Buffer, deadlineMs?: number) => new Promise<Buffer>((resolve, reject) => {
    const opts = deadlineMs ? { deadline: Date.now() + deadlineMs } : {};
    (client[name] as (r: Buffer, m: grpc.Metadata, o: object, cb: (e: grpc.ServiceError | null, r: Buffer) => void) => void)(req, new grpc.Metadata(), opts, (e, r) => (e ? reject(e) : resolve(r)));
  });

  it('grpc-js: 200 calls at once on one connection each get their own answer; an empty message and a 3 MiB one too', async () => {
    const reqs = Array.from({ length: 200 }, (_, i) => Buffer.from(`call ${i}`));
    assert.deepEqual((await Promise.all(reqs.map((r) => unary('Echo', r)))).map(String), reqs.map(String));
    assert.equal((await unary('Echo', Buffer.alloc(0))).length, 0);
    const big = Buffer.alloc(3 << 20, 7);
    assert.ok((await unary('Echo', big)).equals(big));
  });

  it('statuses: the handler\'s code and message (non-ASCII, percent-encoded on the wire), UNIMPLEMENTED for an unknown method, RESOURCE_EXHAUSTED over 4 MiB, DEADLINE_EXCEEDED', async () => {
    const text = 'netns «/run/netns/é» 100% gone\nnext line';
    await assert.rejects(unary('Fail', Buffer.from(text)), (e: grpc.ServiceError) => e.code === grpc.status.FAILED_PRECONDITION && e.details === text);
    const Other = grpc.makeGenericClientConstructor({ Nope: { ...method('Nope'), path: '/test.Probe/Nope' } }, 'Other');
    const other = new Other(`unix://${sock}`, grpc.credentials.createInsecure()) as unknown as Record<string, (r: Buffer, cb: (e: grpc.ServiceError | null) => void) => void>;
    await assert.rejects(new Promise((resolve, reject) => other.Nope(Buffer.alloc(0), (e) => (e ? reject(e) : resolve(null)))), (e: grpc.ServiceError) => e.code === grpc.status.UNIMPLEMENTED && /test\.Probe\/Nope/.test(e.details));
    (other as unknown as grpc.Client).close();
    // grpc-js refuses to send over its own 4 MiB limit; a raw client is needed to go past it.
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(sock) });
    try {
      const status = await new Promise<string>((resolve, reject) => {
        const req = session.request({ ':method': 'POST', ':path': '/test.Probe/Echo', 'content-type': 'application/grpc', te: 'trailers' });
        req.on('response', (h) => h['grpc-status'] && resolve(`${h['grpc-status']} ${h['grpc-message']}`));
        req.on('trailers', (t) => resolve(`${t['grpc-status']} ${t['grpc-message']}`));
        req.on('error', reject);
        req.resume();
        const prefix = Buffer.from([0, 0, 0x50, 0, 0]);
        req.end(Buffer.concat([prefix, Buffer.alloc(5 << 20)]));
      });
      assert.match(status, /^8 /, status);
    } finally {
      session.close();
    }
    await assert.rejects(unary('Slow', Buffer.from('x'), 50), (e: grpc.ServiceError) => e.code === grpc.status.DEADLINE_EXCEEDED);
  });

  it('a server stream: 20 MB through a client that reads slowly arrives whole; a cancelled stream is seen as cancelled', async function () {
    this.timeout(60_000);
    const n = 20_000;
    const stream = (client.Stream as (r: Buffer) => grpc.ClientReadableStream<Buffer>)(Buffer.from([0, 0, n >> 8, n & 0xff]));
    let got = 0;
    let bad = 0;
    await new Promise<void>((resolve, reject) => {
      stream.on('data', (m: Buffer) => {
        if (m.length !== 1000 || m[0] !== got % 256) bad++;
        got++;
        if (got % 2000 === 0) {
          stream.pause();
          setTimeout(() => stream.resume(), 20);
        }
      });
      stream.on('end', () => resolve());
      stream.on('error', reject);
    });
    assert.equal(got, n);
    assert.equal(bad, 0);
    // n = 0: the handler never ends it; the client cancels.
    const open = (client.Stream as (r: Buffer) => grpc.ClientReadableStream<Buffer>)(Buffer.alloc(4));
    const cancelled = new Promise<grpc.ServiceError>((resolve) => open.on('error', resolve));
    setTimeout(() => open.cancel(), 100);
    assert.equal((await cancelled).code, grpc.status.CANCELLED);
    // One more left open for the shutdown below.
    const last = (client.Stream as (r: Buffer) => grpc.ClientReadableStream<Buffer>)(Buffer.alloc(4));
    last.on('data', () => undefined);
    last.on('error', () => undefined);
    shutdownStreamEnded = new Promise((resolve) => last.on('status', resolve));
  });

  it('grpc-go (the bench client; containerd speaks gRPC so): echoes of 0 B to 2 MiB, 100 at once, a failure\'s code and non-ASCII message', async () => {
    assert.ok(fs.existsSync(GO_CLIENT), `${GO_CLIENT} missing: run hack/cluster/build-components.sh bench-client`);
    const p = spawn(GO_CLIENT, ['-probe', sock], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => p.kill('SIGKILL'), 30_000);
    const code = await new Promise<number | null>((resolve) => p.on('exit', resolve));
    clearTimeout(timer);
    assert.equal(code, 0, out);
    assert.equal(out.trim(), 'ok');
  });

  it('random frames after a valid preface (any type, flags, stream, payload; real calls among them): never a throw, and the server still answers', async function () {
    this.timeout(60_000);
    const echoCall = Buffer.concat([
      frame(FRAME.HEADERS, FLAG.END_HEADERS, 1, encodeHeaders([[':method', 'POST'], [':scheme', 'http'], [':path', '/test.Probe/Echo'], ['content-type', 'application/grpc']])),
      frame(FRAME.DATA, FLAG.END_STREAM, 1, Buffer.from([0, 0, 0, 0, 1, 0x2a])),
    ]);
    const anyFrame = fc.record({
      type: fc.integer({ min: 0, max: 12 }),
      flags: fc.integer({ min: 0, max: 255 }),
      stream: fc.oneof(fc.constantFrom(0, 1, 3, 5), fc.integer({ min: 0, max: 2 ** 31 - 1 })),
      payload: fc.uint8Array({ maxLength: 64 }),
    }).map((f) => frame(f.type, f.flags, f.stream, Buffer.from(f.payload)));
    await fc.assert(fc.asyncProperty(fc.array(fc.oneof(anyFrame, fc.constant(echoCall)), { maxLength: 12 }), async (frames) => {
      await new Promise<void>((resolve) => {
        const c = net.connect(sock, () => c.write(Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0), ...frames])));
        c.on('data', () => undefined);
        c.on('error', () => undefined);
        c.on('close', () => resolve());
        setTimeout(() => c.destroy(), 30);
      });
    }), { numRuns: 300 });
    assert.equal(String(await unary('Echo', Buffer.from('still here'))), 'still here');
  });

  it('shutdown: a call in flight is answered, an open stream ends with UNAVAILABLE, then done', async () => {
    const started = new Promise<void>((r) => (slowStarted = r));
    const inFlight = unary('Slow', Buffer.from('last'));
    await started; // the server has the call
    const done = new Promise<void>((r) => server.shutdown(r));
    assert.equal(String(await inFlight), 'last');
    assert.equal((await shutdownStreamEnded!).code, grpc.status.UNAVAILABLE);
    client.close();
    await done;
  });
});
