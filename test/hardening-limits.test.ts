// Nothing a peer sends is unbounded: CNI socket (size, deadline, connections), gRPC socket
// (connections, handshake, per-method sizes, paged lists), and the shim's own deadlines.
import * as grpc from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { Client, listAllPods } from '../plugin/client/clients';
import { encodeRequest, MAX_REQUEST } from '../runtime-hooks/cni/cni-wire';
import { cni, SHIM } from './helpers/cni-exec';
import { rejectsWith } from './helpers/expect';
import { RUN } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

const S = grpc.status;

/** Sends raw bytes to a unix socket and resolves with what comes back when it closes. */
function rawExchange(socket: string, parts: Buffer[], gapMs = 0): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const c = net.connect(socket);
    const got: Buffer[] = [];
    c.on('data', (b: Buffer) => got.push(b));
    c.on('error', reject);
    c.on('close', () => resolve(Buffer.concat(got)));
    c.once('connect', async () => {
      for (const p of parts) {
        if (c.destroyed) return;
        c.write(p);
        if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
      }
    });
  });
}

const answerText = (b: Buffer): string => b.subarray(8).toString();
const u32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(v >>> 0);
  return b;
};

describe('hardening: limits', () => {
  let d: TestDaemon;
  let rt: Client;
  before(async () => {
    d = await TestDaemon.start();
    rt = d.rt();
  });
  after(() => d?.cleanup());

  it('CNI: length prefixes of 100 MB and 4 GiB, and a request just over the cap, are refused at once', async () => {
    for (const len of [100_000_000, 0xffffffff, MAX_REQUEST + 1]) {
      const out = answerText(await rawExchange(d.cniSocket, [u32(len)]));
      assert.match(out, /"code":5,"msg":"request of \d+ bytes is larger than \d+"/);
    }
  });

  it('CNI: a request not sent in full within the deadline is answered with an error and closed', async function () {
    this.timeout(60_000);
    const out = answerText(await rawExchange(d.cniSocket, [u32(100), Buffer.from('ab')]));
    assert.match(out, /request not received within 10000 ms/);
  });

  it('CNI: 100 connections each sending 1 MiB in 64 KiB pieces; STATUS still answers and memory stays bounded', async function () {
    this.timeout(120_000);
    const big = encodeRequest({ CNI_COMMAND: 'STATUS', STDIN: JSON.stringify({ cniVersion: '1.0.0', name: 'x', pad: 'x'.repeat(1 << 20) }) });
    assert.ok(big.length <= 4 + MAX_REQUEST);
    const pieces: Buffer[] = [];
    for (let o = 0; o < big.length; o += 64 << 10) pieces.push(big.subarray(o, o + (64 << 10)));
    const floods = Array.from({ length: 100 }, () => rawExchange(d.cniSocket, pieces, 5));
    const status = cni('STATUS', {}, { cniVersion: '1.0.0', name: 'kni', socket: d.cniSocket });
    assert.equal(status.code, 0, status.raw);
    const answers = await Promise.all(floods);
    assert.equal(answers.length, 100);
    for (const a of answers) assert.equal(a.readUInt32BE(0), 0, answerText(a));
    const rssKb = Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${d.proc!.pid}/status`, 'utf8'))![1]);
    assert.ok(rssKb < 500 * 1024, `daemon RSS ${rssKb} kB after the flood`);
  });

  it('CNI GC: a containerID that is not a string is an invalid config (7), naming the entry', () => {
    const r = cni('GC', {}, { cniVersion: '1.1.0', name: 'kni', socket: d.cniSocket, 'cni.dev/valid-attachments': [{ containerID: 'a', ifname: 'eth0' }, { containerID: 42 }] });
    assert.equal(r.code, 1);
    assert.equal(r.out.code, 7);
    assert.match(r.out.msg, /valid-attachments\[1\]\.containerID is not a string/);
  });

  it('kni-cni: gives up connecting to a daemon whose backlog is full, and waiting for one that never answers', async function () {
    this.timeout(60_000);
    const wedged = `/tmp/${RUN}-wedged.sock`;
    // A listener that never accepts, with the smallest backlog: one queued connection fills it.
    const py = spawn('python3', ['-c', `import socket,time\ns=socket.socket(socket.AF_UNIX)\ns.bind('${wedged}')\ns.listen(0)\nprint('ok',flush=True)\ntime.sleep(60)`], { stdio: ['ignore', 'pipe', 'inherit'] });
    const mute = net.createServer(() => undefined); // accepts, reads nothing, answers nothing
    const muteSock = `/tmp/${RUN}-mute.sock`;
    try {
      await new Promise((r) => py.stdout!.once('data', r));
      const fillers = [net.connect(wedged), net.connect(wedged)];
      // Each one queued or refused (the backlog full) before the shim tries.
      await Promise.all(fillers.map((f) => new Promise((r) => f.once('connect', r).on('error', r))));
      const conf = JSON.stringify({ cniVersion: '1.0.0', name: 'kni', socket: wedged });
      const slow = spawnSync(SHIM, [], { input: conf, encoding: 'utf8', env: { CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'x' }, timeout: 30_000 });
      assert.equal(slow.status, 1);
      assert.match(slow.stdout, /"code":11,"msg":"kni-runtime is not reachable: connecting timed out","details":"no answer from .* within 5 s"/);
      fillers.forEach((f) => f.destroy());
      await new Promise<void>((r) => mute.listen(muteSock, r));
      const silent = spawnSync(SHIM, [], { input: JSON.stringify({ cniVersion: '1.0.0', name: 'kni', socket: muteSock }), encoding: 'utf8', env: { CNI_COMMAND: 'STATUS', KNI_CNI_TIMEOUT_SECONDS: '2' }, timeout: 30_000 });
      assert.equal(silent.status, 1);
      assert.match(silent.stdout, /"code":50,"msg":"kni-runtime did not answer in time","details":"no answer from .* within 2 s"/);
    } finally {
      py.kill('SIGKILL');
      mute.close();
      fs.rmSync(wedged, { force: true });
      fs.rmSync(muteSock, { force: true });
    }
  });

  it('gRPC: connections over the limit are refused and logged, silent ones are closed at the handshake deadline, clients then get through', async function () {
    this.timeout(90_000);
    const from = d.output.length;
    const conns: net.Socket[] = [];
    let closed = 0;
    // In batches: too many connects at once overflow the listen backlog (EAGAIN) before kni sees them.
    while (conns.length < 1100) {
      const batch = await Promise.all(Array.from({ length: 100 }, () => new Promise<net.Socket | undefined>((resolve) => {
        const c = net.connect(d.socket);
        c.once('connect', () => resolve(c));
        c.once('error', () => resolve(undefined));
      })));
      for (const c of batch) {
        if (!c) continue;
        c.on('error', () => undefined);
        c.on('close', () => closed++);
        conns.push(c);
      }
    }
    try {
      await waitFor(() => /gRPC socket: connection refused, too many at once/.test(d.output.slice(from)), 20_000, () => `no refusal logged; ${closed} closed`);
      // Silent connections (no HTTP/2 preface) are closed 10 s after they were accepted.
      await waitFor(() => closed === conns.length, 40_000, () => `${closed} of ${conns.length} closed`);
      assert.equal((await rt.GetNode({})).ready, true);
    } finally {
      conns.forEach((c) => c.destroy());
    }
  });

  it('gRPC: a request over its method\'s cap is refused undecoded with RESOURCE_EXHAUSTED', async () => {
    const netns = d.makePodNetns('capped');
    const huge = Object.fromEntries(Array.from({ length: 6 }, (_, i) => [`k${i}`, 'x'.repeat(200 * 1024)]));
    await rejectsWith(rt.Attach({ sandbox_id: 'capped', netns_path: netns, labels: huge, annotations: huge }), S.RESOURCE_EXHAUSTED, /Attach request of \d+ bytes is larger than 1048576 bytes/);
    const raw = new grpc.Client(`unix://${d.socket}`, grpc.credentials.createInsecure());
    try {
      const err = await new Promise<grpc.ServiceError>((resolve) =>
        raw.makeUnaryRequest('/kni.runtime.v1.NetworkRuntime/GetNode', (b: Buffer) => b, (b: Buffer) => b, Buffer.alloc(100_000, 0x0a), (e) => resolve(e!)),
      );
      assert.equal(err.code, S.RESOURCE_EXHAUSTED);
      assert.match(err.details, /GetNode request of 100000 bytes is larger than 65536/);
    } finally {
      raw.close();
    }
    assert.equal((await rt.GetIPAMStatus({})).ranges[0].used, '0');
  });

  it('ListPods pages: 20 pods with 250 KiB of annotations each (5 MB) come back whole, no page over 4 MiB', async function () {
    this.timeout(60_000);
    const ann = { big: 'a'.repeat(250 * 1024) };
    for (let i = 0; i < 20; i++) await rt.Attach({ sandbox_id: `page${String(i).padStart(2, '0')}`, netns_path: d.makePodNetns(`page${i}`), annotations: ann });
    const first = await rt.ListPods({});
    assert.ok(first.pods.length < 20 && first.next_page_token, 'one page held every pod');
    const all = await listAllPods(rt);
    assert.deepEqual(all.map((p) => p.sandbox_id), Array.from({ length: 20 }, (_, i) => `page${String(i).padStart(2, '0')}`));
    const two = await rt.ListPods({ page_size: 2 });
    assert.deepEqual([two.pods.length, two.next_page_token], [2, 'page01']);
    for (let i = 0; i < 20; i++) await rt.Detach({ sandbox_id: `page${String(i).padStart(2, '0')}` });
  });
});
