// A hostile or broken NRI peer costs its connection, never the daemon; reconnects stay bounded;
// nothing a peer sends makes kni keep state without bound.
import assert from 'node:assert/strict';
import { Duplex } from 'node:stream';
import { Mux } from '../runtime-hooks/nri/mux';
import { MAX_SYNC_PODS } from '../runtime-hooks/nri/nri-plugin';
import { STATUS, TtrpcError } from '../runtime-hooks/nri/ttrpc';
import { ByteQueue } from '../runtime-hooks/wire/byte-queue';
import { FakeNriRuntime } from './helpers/fake-nri-runtime';
import { RUN } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';
import { hex, RawPeer } from './helpers/raw-peer';


async function daemonWith(peer: RawPeer): Promise<TestDaemon> {
  await peer.listen();
  return TestDaemon.start({ nri: { enabled: true, socket: peer.socket, syncGraceSeconds: 0 } });
}

describe('NRI hardening', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  for (const [what, bytes] of [
    ['a ttrpc length over 4 MiB on the plugin conn', '00000001 0000000a fffffff0 00000001 0100'],
    ['a malformed reply to RegisterPlugin', '00000002 00000010 00000006 00000001 0200 ffffffffffff'],
  ] as const) {
    it(`${what} costs the connection, not the daemon; kni reconnects`, async () => {
      const peer = new RawPeer((sock, n) => {
        if (n === 1) sock.once('data', () => sock.write(hex(bytes))); // answer the RegisterPlugin request
      });
      const d = await daemonWith(peer);
      cleanups.push(() => d.cleanup(), () => peer.close());
      await waitFor(() => peer.connections.length >= 2, 20_000, () => `kni did not reconnect; connections: ${peer.connections.length}\n${d.output}`);
      assert.equal(d.proc!.exitCode, null, `the daemon exited:\n${d.output}`);
      assert.equal((await d.rt().GetNode({})).ready, true);
      assert.match(d.output, /NRI peer sent what kni cannot decode; closing the connection/);
    });
  }

  it('a runtime that closes before registration gets a bounded, backed-off reconnect (one timer)', async () => {
    const peer = new RawPeer((sock) => sock.destroy());
    const d = await daemonWith(peer);
    cleanups.push(() => d.cleanup(), () => peer.close());
    await new Promise((r) => setTimeout(r, 8000));
    const n = peer.connections.length;
    // Backoff 250 ms doubling to 30 s with jitter in [½, 1]: at most 6 attempts start in 8 s
    // (0, ≥125, ≥375, ≥875, ≥1875, ≥3875 ms …). Twice the timers would make it grow without bound.
    assert.ok(n >= 3, `kni stopped reconnecting: ${n} connections`);
    assert.ok(n <= 7, `reconnect storm: ${n} connections in 8 s`);
    const gaps = peer.connections.slice(1).map((c, i) => c.at - peer.connections[i].at);
    assert.ok(gaps[gaps.length - 1] >= 400, `the backoff does not grow: gaps ${gaps.join(', ')} ms`);
    assert.equal(d.proc!.exitCode, null);
  });

  it('frames for conn ids kni never opened are dropped, not kept (unit: 200 000 ids)', () => {
    const a = new Duplex({ read() {}, write(_c, _e, cb) { cb(); } });
    const mux = new Mux(a);
    let got = 0;
    mux.conn(1).on('data', () => got++);
    const frames = Buffer.alloc(200_000 * 8);
    for (let i = 0; i < 200_000; i++) frames.writeUInt32BE(i + 3, i * 8);
    a.push(frames);
    a.push(hex('00000001 00000001 41'));
    // Read a bounded number of frames a turn: the event loop turns while the flood is gone through.
    let turns = 0;
    return new Promise<void>((r) => {
      const look = (): void => {
        turns++;
        if (got === 0 && turns < 1000) return void setImmediate(look);
        assert.equal(mux.dropped, 200_000);
        assert.equal(got, 1);
        assert.ok(turns > 2, `the flood was read in ${turns} turn(s): the event loop was held`);
        assert.equal((mux as unknown as { conns: Map<number, unknown> }).conns.size, 1);
        r();
      };
      setImmediate(look);
    });
  });

  it('200 000 empty frames to distinct conn ids: the daemon keeps serving NRI and gRPC', async () => {
    const rt = new FakeNriRuntime(`/tmp/${RUN}-nriflood.sock`);
    await rt.listen();
    const d = await TestDaemon.start({ nri: { enabled: true, socket: rt.socket, syncGraceSeconds: 0 } });
    cleanups.push(() => d.cleanup(), () => rt.stop());
    const s = await rt.nextSession();
    const frames = Buffer.alloc(200_000 * 8);
    for (let i = 0; i < 200_000; i++) frames.writeUInt32BE(i + 3, i * 8);
    (s as unknown as { mux: { sock: Duplex } }).mux.sock.write(frames);
    const netns = d.makePodNetns('flood');
    await s.runPodSandbox({ id: 'flood', name: 'f', namespace: 'nri', netns });
    assert.deepEqual((await d.rt().ListPods({})).pods.map((p: { sandbox_id: string }) => p.sandbox_id), ['flood']);
    await s.stopPodSandbox({ id: 'flood' });
  });

  it(`Synchronize with "more" is bounded: over ${MAX_SYNC_PODS} pods is refused and nothing is released`, async () => {
    const rt = new FakeNriRuntime(`/tmp/${RUN}-nrisync.sock`);
    await rt.listen();
    const d = await TestDaemon.start({ nri: { enabled: true, socket: rt.socket, syncGraceSeconds: 0 } });
    cleanups.push(() => d.cleanup(), () => rt.stop());
    const s = await rt.nextSession();
    const netns = d.makePodNetns('keepsync');
    await s.runPodSandbox({ id: 'keepsync', name: 'k', namespace: 'nri', netns });
    const batch = Array.from({ length: 40_000 }, (_, i) => ({ id: i === 0 ? 'keepsync' : `p${i}` }));
    await s.call('Synchronize', 'SynchronizeRequest', { pods: batch, more: true });
    await assert.rejects(s.call('Synchronize', 'SynchronizeRequest', { pods: batch, more: true }), (e: TtrpcError) => e.code === STATUS.RESOURCE_EXHAUSTED && /more than 65536 pods/.test(e.message));
    assert.deepEqual((await d.rt().ListPods({})).pods.map((p: { sandbox_id: string }) => p.sandbox_id), ['keepsync'], 'a refused Synchronize released something');
    // The refused batches were dropped: a new Synchronize listing nothing now releases keepsync.
    await s.call('Synchronize', 'SynchronizeRequest', { pods: [], more: false });
    await waitFor(async () => (await d.rt().ListPods({})).pods.length === 0, 10_000, () => 'the batch refused earlier was kept');
  });
});

describe('byte queue', () => {
  it('takes frames across and inside chunks, in order', () => {
    const q = new ByteQueue();
    for (const c of ['ab', 'cde', '', 'f', 'ghij']) q.push(Buffer.from(c));
    assert.equal(q.length, 10);
    assert.equal(q.peek(4).toString(), 'abcd');
    assert.equal(q.take(1).toString(), 'a');
    assert.equal(q.take(5).toString(), 'bcdef');
    assert.equal(q.peek(2).toString(), 'gh');
    assert.equal(q.take(4).toString(), 'ghij');
    assert.equal(q.length, 0);
    assert.throws(() => q.take(1), RangeError);
  });
});
