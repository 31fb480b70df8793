// kni's gRPC socket judged by HTTP/2's own conformance suite, h2spec (built from
// github.com/summerwind/h2spec by hack/cluster/build-components.sh), beside a bare grpc-js server
// in the same run: kni passes every case the bare server passes. h2spec speaks TCP, so each unix
// socket is bridged from a loopback port. And the two attacks a root client could make on the
// socket: a header block that never ends (endless CONTINUATION frames), and a thousand streams
// whose requests never end: kni's memory stays bounded and other callers are answered.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { BIN } from './cluster/cluster-helpers';
import { RUN } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

const H2SPEC = `${BIN}/h2spec`;

/** A loopback TCP port that carries each connection to the unix socket. */
async function bridge(socketPath: string): Promise<{ port: number; close(): void }> {
  const server = net.createServer((tcp) => {
    const unix = net.connect(socketPath);
    tcp.pipe(unix).pipe(tcp);
    const end = () => {
      tcp.destroy();
      unix.destroy();
    };
    tcp.on('error', end);
    unix.on('error', end);
    tcp.on('close', end);
    unix.on('close', end);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as net.AddressInfo).port, close: () => server.close() };
}

type Verdict = 'passed' | 'failed' | 'skipped';

/**
 * Runs h2spec (all of it, or the cases named) through a loopback port and reads its JUnit report:
 * each case's id (`generic/2/2`, `http2/5.1.1/2`) and verdict. Run as a child this process waits
 * on without blocking: the bridges (and the bare server) are in this process.
 */
async function h2spec(port: number, junit: string, cases: string[] = []): Promise<{ verdicts: Map<string, Verdict>; out: string }> {
  const p = spawn(H2SPEC, ['-h', '127.0.0.1', '-p', String(port), '-o', '3', '-j', junit, '-P', '/kni.runtime.v1.NetworkRuntime/GetNode', ...cases], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  p.stdout.on('data', (b) => (out += b));
  p.stderr.on('data', (b) => (out += b));
  const timer = setTimeout(() => p.kill('SIGKILL'), 400_000);
  await new Promise((r) => p.once('exit', r));
  clearTimeout(timer);
  assert.ok(/\d+ tests, \d+ passed, \d+ skipped, \d+ failed/.test(out), `h2spec did not finish on port ${port}:\n${out.slice(-2000)}`);
  const verdicts = new Map<string, Verdict>();
  for (const suite of fs.readFileSync(junit, 'utf8').split('<testsuite ').slice(1)) {
    const pkg = /package="([^"]+)"/.exec(suite)![1];
    suite
      .split('<testcase ')
      .slice(1)
      .forEach((tc, i) => {
        const body = tc.slice(0, tc.indexOf('</testcase>'));
        verdicts.set(`${pkg}/${i + 1}`, /<(error|failure)/.test(body) ? 'failed' : /<skipped/.test(body) ? 'skipped' : 'passed');
      });
  }
  return { verdicts, out };
}

const count = (v: Map<string, Verdict>, verdict: Verdict): number => [...v.values()].filter((x) => x === verdict).length;

const rssMb = (pid: number): number => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

describe("kni's gRPC socket: HTTP/2 conformance (h2spec) and attacks on its memory", function () {
  this.timeout(600_000);
  let d: TestDaemon;
  const dir = `/tmp/${RUN}-h2spec`;
  before(async () => {
    assert.ok(fs.existsSync(H2SPEC), `${H2SPEC} is missing: run bash hack/cluster/build-components.sh h2spec`);
    fs.mkdirSync(dir, { recursive: true });
    d = await TestDaemon.start();
  });
  after(() => {
    d?.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('h2spec: every case a bare grpc-js server passes, kni passes too (cases that differ are run again alone on both)', async () => {
    const bare = new grpc.Server();
    const bareSock = `${dir}/bare.sock`;
    await new Promise<void>((resolve, reject) => bare.bindAsync(`unix://${bareSock}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
    const toKni = await bridge(d.socket);
    const toBare = await bridge(bareSock);
    try {
      const kni = await h2spec(toKni.port, `${dir}/kni.xml`);
      const plain = await h2spec(toBare.port, `${dir}/bare.xml`);
      process.stdout.write(`      h2spec: kni ${count(kni.verdicts, 'passed')} passed, bare grpc-js ${count(plain.verdicts, 'passed')} passed\n`);
      // A few cases hinge on timing, on either server: a 3 s wait for a frame, a skip when a
      // setting arrives late, and 8.1.2.6/1, which both fail in a few runs in a hundred (kni 2 of
      // 40, bare grpc-js 1 of 40, one idle run) when grpc-js answers the request's HEADERS before
      // the DATA frame whose length contradicts it arrives. So one full run each can differ by a
      // case either way. Each case the bare server passes and kni does not is run again, alone,
      // five times on both: a case kni then never passes, and the bare server does, is kni's.
      const behind = [...plain.verdicts].filter(([id, v]) => v === 'passed' && kni.verdicts.get(id) !== 'passed').map(([id]) => id);
      const lost: string[] = [];
      for (const id of behind) {
        let kniPasses = 0;
        let barePasses = 0;
        for (let i = 0; i < 5; i++) {
          if ((await h2spec(toKni.port, `${dir}/kni-again.xml`, [id])).verdicts.get(id) === 'passed') kniPasses++;
          if ((await h2spec(toBare.port, `${dir}/bare-again.xml`, [id])).verdicts.get(id) === 'passed') barePasses++;
        }
        process.stdout.write(`      ${id} again: kni ${kniPasses} of 5, bare ${barePasses} of 5\n`);
        if (kniPasses === 0 && barePasses > 0) lost.push(`${id}: kni 0 of 5, bare ${barePasses} of 5`);
      }
      assert.deepEqual(lost, [], `cases a bare grpc-js server passes and kni never does:\n${kni.out.slice(-4000)}`);
      assert.equal((await d.rt().GetNode({})).ready, true);
    } finally {
      toKni.close();
      toBare.close();
      bare.forceShutdown();
    }
  });

  it('a header block that never ends (HEADERS, then endless empty CONTINUATION frames): memory bounded, other callers answered', async () => {
    const pid = d.proc!.pid!;
    const before = rssMb(pid);
    const c = net.connect(d.socket);
    c.on('error', () => undefined);
    await new Promise((r) => c.once('connect', r));
    const frame = (type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer => {
      const h = Buffer.alloc(9);
      h.writeUIntBE(payload.length, 0, 3);
      h.writeUInt8(type, 3);
      h.writeUInt8(flags, 4);
      h.writeUInt32BE(stream, 5);
      return Buffer.concat([h, payload]);
    };
    c.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), frame(4, 0, 0)]));
    // :method POST (static index 3), no END_HEADERS; then CONTINUATION frames with nothing in them.
    c.write(frame(1, 0, 1, Buffer.from([0x83])));
    const empty = Buffer.concat(Array.from({ length: 4096 }, () => frame(9, 0, 1)));
    let sent = 0;
    let closed = false;
    c.on('close', () => (closed = true));
    const rt = d.rt();
    for (let i = 0; i < 250 && !closed; i++) {
      if (!c.write(empty)) await new Promise((r) => setTimeout(r, 5));
      sent += 4096;
    }
    const t0 = performance.now();
    assert.equal((await rt.GetNode({})).ready, true);
    assert.ok(performance.now() - t0 < 2000, 'another caller waited');
    const grew = rssMb(pid) - before;
    c.destroy();
    assert.ok(grew < 100, `kni grew by ${Math.round(grew)} MB for ${sent} CONTINUATION frames (closed by kni: ${closed})`);
  });

  it('a thousand streams whose requests never end: at most the per-connection streams are taken, memory bounded, other callers answered', async () => {
    const pid = d.proc!.pid!;
    const before = rssMb(pid);
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(d.socket) });
    session.on('error', () => undefined);
    const streams: http2.ClientHttp2Stream[] = [];
    let refused = 0;
    // Each declares a 4 MiB request (the largest any method takes) and sends 256 KiB of it.
    const prefix = Buffer.from([0, 0, 0x40, 0, 0]);
    const chunk = Buffer.alloc(256 << 10, 0x0a);
    for (let i = 0; i < 1000; i++) {
      const s = session.request({ ':method': 'POST', ':path': '/kni.runtime.v1.NetworkRuntime/GarbageCollect', 'content-type': 'application/grpc', te: 'trailers' });
      s.on('error', () => refused++);
      s.on('response', () => undefined);
      s.write(prefix);
      s.write(chunk);
      streams.push(s);
    }
    try {
      await new Promise((r) => setTimeout(r, 3000));
      const t0 = performance.now();
      assert.equal((await d.rt().GetNode({})).ready, true);
      assert.ok(performance.now() - t0 < 2000, 'another caller waited');
      const grew = rssMb(pid) - before;
      assert.ok(grew < 200, `kni grew by ${Math.round(grew)} MB for 1000 unending streams of 256 KiB`);
    } finally {
      streams.forEach((s) => s.close(http2.constants.NGHTTP2_CANCEL));
      session.destroy();
    }
    await waitFor(async () => (await d.rt().GetNode({})).ready === true, 10_000, () => 'kni stopped answering');
  });
});
