// What a call costs before kni does anything: the round trip of a call that does nothing, over
// a unix socket, to another Node process, through each layer a Node gRPC server can stand on —
// raw bytes, Node's HTTP/2 with a gRPC-shaped exchange, a grpc-js server — and kni's own no-op
// call (GetIPAMStatus, served by grpc-js). Measured back to back and with 4 ms of idleness before each call, as
// between attaches (an attach keeps both processes waiting that long): on this VM kind a
// process woken from idle pays the hypervisor's wake-up on every hop.
//   node dist/bench/transport-floor.js            prints the table
//   (the network bench runs it too, and prints it beside the gRPC target)
import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { Client } from '../plugin/client/clients';
import { percentile } from './stats';

const passthrough = (b: Buffer) => b;
const PING: grpc.ServiceDefinition = {
  Ping: { path: '/bench.Floor/Ping', requestStream: false, responseStream: false, requestSerialize: passthrough, requestDeserialize: passthrough, responseSerialize: passthrough, responseDeserialize: passthrough, originalName: 'Ping' },
};
const GRPC_FRAME = Buffer.from([0, 0, 0, 0, 1, 0x2a]);

/** The servers, in their own process (as kni is): raw echo, bare HTTP/2, grpc-js. */
function serve(dir: string): void {
  net.createServer((c) => c.on('data', (d) => c.write(d))).listen(path.join(dir, 'raw.sock'));
  const h2 = http2.createServer();
  h2.on('stream', (stream: http2.ServerHttp2Stream) => {
    stream.on('data', () => undefined);
    stream.on('end', () => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(GRPC_FRAME);
    });
  });
  net.createServer((s) => h2.emit('connection', s)).listen(path.join(dir, 'h2.sock'));
  const g = new grpc.Server();
  g.addService(PING, { Ping: (_call: unknown, cb: grpc.sendUnaryData<Buffer>) => cb(null, Buffer.from([0x2a])) });
  g.bindAsync(`unix://${path.join(dir, 'grpcjs.sock')}`, grpc.ServerCredentials.createInsecure(), () => process.stdout.write('ready\n'));
}

export interface TransportRow { path: string; backToBack: number; afterIdle: number }

async function rtt(call: () => Promise<unknown>, n: number, gapMs: number): Promise<number> {
  const ms: number[] = [];
  for (let i = 0; i < n + 50; i++) {
    if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
    const t = performance.now();
    await call();
    if (i >= 50) ms.push(performance.now() - t);
  }
  return percentile(ms, 50);
}

/** p50 round trips (ms) of a no-op call through each layer; `kni`: a client of a running kni. */
export async function transportFloor(n = 400, kni?: Client): Promise<TransportRow[]> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kni-transport-'));
  let server: ChildProcess | undefined;
  const closers: (() => void)[] = [];
  try {
    server = spawn(process.execPath, [__filename, '--serve', dir], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      server!.stdout!.once('data', () => resolve());
      server!.once('exit', (c) => reject(new Error(`transport floor server exited (${c})`)));
    });
    const raw = net.connect(path.join(dir, 'raw.sock'));
    await new Promise((r) => raw.once('connect', r));
    closers.push(() => raw.destroy());
    const h2 = http2.connect('http://localhost', { createConnection: () => net.connect(path.join(dir, 'h2.sock')) });
    closers.push(() => h2.close());
    const Ping = grpc.makeGenericClientConstructor(PING, 'Floor');
    const g = new Ping(`unix://${path.join(dir, 'grpcjs.sock')}`, grpc.credentials.createInsecure());
    closers.push(() => g.close());
    const calls: [string, () => Promise<unknown>][] = [
      ['raw bytes over the unix socket', () => new Promise((r) => { raw.once('data', r); raw.write('*'); })],
      ["Node's HTTP/2, both ends (a gRPC-shaped unary exchange)", () => new Promise((resolve, reject) => {
        const s = h2.request({ ':method': 'POST', ':path': '/bench.Floor/Ping', 'content-type': 'application/grpc', te: 'trailers' });
        s.on('data', () => undefined);
        s.on('end', resolve);
        s.on('error', reject);
        s.end(GRPC_FRAME);
      })],
      ['grpc-js, both ends', () => new Promise((resolve, reject) => (g as any).Ping(Buffer.from([0x2a]), (e: Error | null) => (e ? reject(e) : resolve(null))))],
      ...(kni ? [['kni GetIPAMStatus (grpc-js client)', () => kni.GetIPAMStatus({})] as [string, () => Promise<unknown>]] : []),
    ];
    const rows: TransportRow[] = [];
    for (const [name, call] of calls) rows.push({ path: name, backToBack: await rtt(call, n, 0), afterIdle: await rtt(call, n, 4) });
    return rows;
  } finally {
    for (const c of closers) c();
    server?.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

export function transportTable(rows: TransportRow[]): string {
  const f = (x: number) => x.toFixed(3);
  return ['| no-op call, p50 round trip (ms) | back to back | after 4 ms idle |', '|---|---|---|', ...rows.map((r) => `| ${r.path} | ${f(r.backToBack)} | ${f(r.afterIdle)} |`)].join('\n');
}

if (require.main === module) {
  const i = process.argv.indexOf('--serve');
  if (i > 0) serve(process.argv[i + 1]);
  else {
    transportFloor().then((rows) => {
      process.stdout.write(`${transportTable(rows)}\n`);
      process.exit(0);
    }, (e) => {
      console.error(`transport-floor: ${(e as Error).message}`);
      process.exit(1);
    });
  }
}
