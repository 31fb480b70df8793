// kni's NRI plugin against a runtime that speaks NRI's wire format (test/helpers/fake-nri-runtime.ts).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { Duplex } from 'node:stream';
import { Mux } from '../runtime-hooks/nri/mux';
import { encode, PLUGIN_SERVICE } from '../runtime-hooks/nri/nri-proto';
import { STATUS, TtrpcEndpoint, TtrpcError } from '../runtime-hooks/nri/ttrpc';
import { packageRoot } from '../plugin/server/protos';
import { cni } from './helpers/cni-exec';
import { FakeNriRuntime, FakeNriSession } from './helpers/fake-nri-runtime';
import { inNetns } from './helpers/sh';
import { stateRecords } from './helpers/state-records';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

/** A Duplex that records what is written, for byte-level checks. */
class Capture extends Duplex {
  written: Buffer[] = [];
  _write(chunk: Buffer, _enc: BufferEncoding, cb: () => void): void {
    this.written.push(Buffer.from(chunk));
    cb();
  }
  _read(): void {}
}

describe('NRI wire format (bytes)', () => {
  it('multiplexer frames: uint32 BE conn id, uint32 BE length, payload; at most 4096 bytes each', () => {
    const cap = new Capture();
    const mux = new Mux(cap);
    mux.conn(2).write(Buffer.from('ab'));
    assert.equal(cap.written[0].toString('hex'), '00000002' + '00000002' + '6162');
    cap.written = [];
    mux.conn(1).write(Buffer.alloc(10_000, 7));
    assert.ok(cap.written.every((f) => f.length <= 4096));
    assert.equal(cap.written.reduce((n, f) => n + f.length - 8, 0), 10_000);
    assert.throws(() => mux.conn(0), /reserved/);
  });

  it('multiplexer reads frames split and merged at any byte boundary', () => {
    const cap = new Capture();
    const mux = new Mux(cap);
    const got: string[] = [];
    mux.conn(1).on('data', (b: Buffer) => got.push(`1:${b}`));
    mux.conn(2).on('data', (b: Buffer) => got.push(`2:${b}`));
    const bytes = Buffer.from('00000001000000036162630000000200000001' + '78', 'hex');
    for (const b of bytes) cap.push(Buffer.from([b]));
    return new Promise<void>((r) => setImmediate(() => {
      assert.deepEqual(got, ['1:abc', '2:x']);
      r();
    }));
  });

  it('ttrpc request frame: length, odd stream id, type 1, flags 0, then Request{service, method, payload}', () => {
    const cap = new Capture();
    const ep = new TtrpcEndpoint({ write: (b) => cap.written.push(b), on: () => undefined });
    void ep.call('s', 'm', Buffer.from([0x01]), 10).catch(() => undefined);
    void ep.call('s', 'm', Buffer.alloc(0), 10).catch(() => undefined);
    const f = cap.written[0];
    assert.equal(f.readUInt32BE(0), f.length - 10);
    assert.equal(f.readUInt32BE(4), 1);
    assert.equal(cap.written[1].readUInt32BE(4), 3);
    assert.equal(f.readUInt8(8), 1);
    assert.equal(f.readUInt8(9), 0);
    // field 1 "s", field 2 "m", field 3 bytes [01], field 4 timeout_nano 10 ms = 10_000_000 (varint)
    assert.equal(f.subarray(10).toString('hex'), '0a0173' + '12016d' + '1a0101' + '2080ade204');
  });

  it('answers a request it does not serve with UNIMPLEMENTED (12)', async () => {
    let serverIn: (b: Buffer) => void = () => undefined;
    let clientIn: (b: Buffer) => void = () => undefined;
    new TtrpcEndpoint({ write: (b) => clientIn(b), on: (_e, fn) => (serverIn = fn) }, async () => {
      throw new TtrpcError(STATUS.UNIMPLEMENTED, 'nope');
    });
    const client = new TtrpcEndpoint({ write: (b) => serverIn(b), on: (_e, fn) => (clientIn = fn) });
    await assert.rejects(client.call('x', 'y', Buffer.alloc(0), 1000), (e: TtrpcError) => e.code === 12 && e.message === 'nope');
  });
});

describe('NRI plugin', () => {
  let d: TestDaemon;
  let rt: FakeNriRuntime;
  let s: FakeNriSession;

  before(async () => {
    rt = new FakeNriRuntime(`/tmp/kni-nri-${process.pid}.sock`);
    await rt.listen();
    d = await TestDaemon.start({ nri: { enabled: true, socket: rt.socket, syncGraceSeconds: 0 } });
    s = await rt.nextSession();
  });
  after(async () => {
    await rt?.stop();
    d?.cleanup();
  });

  const pods = async () => (await d.rt().ListPods()).pods.map((p: any) => p.sandbox_id).sort();

  it('registers with its name and index, and subscribes to the pod sandbox events (mask 0x7)', () => {
    assert.deepEqual(s.registered, { pluginName: 'kni', pluginIdx: '10', NRIVersion: '' });
    assert.equal(s.events, 0x7);
  });

  it('RunPodSandbox wires the pod; StopPodSandbox releases; RemovePodSandbox after that is fine', async () => {
    const netns = d.makePodNetns('nri-run');
    const pod = { id: 'nri-run', name: 'web', namespace: 'nri', uid: 'uid-1', labels: { a: 'b' }, netns, cgroupParent: '/kubepods/besteffort/poduid-1' };
    await s.runPodSandbox(pod);
    const p = await d.rt().GetPod({ sandbox_id: 'nri-run' });
    assert.deepEqual(p.pod, { name: 'web', namespace: 'nri', uid: 'uid-1' });
    // Kept for the plugins of the pod's CNI networks (the cgroupPath capability).
    assert.equal(stateRecords(d.stateDir, 'sandboxes').get('nri-run')?.cgroupParent, '/kubepods/besteffort/poduid-1');
    assert.match(inNetns(netns, 'ip', ['-o', 'addr']).out, new RegExp(`inet ${p.interfaces[0].addresses[0].address.replace(/\./g, '\\.')}/`));
    await s.stopPodSandbox({ id: 'nri-run' }); // containerd < 2.3 sends no netns on stop
    assert.deepEqual(await pods(), []);
    // The runtime removes the netns after a stop: kni answers before the kernel's veth delete,
    // which follows within moments (batched).
    await waitFor(() => !/eth0/.test(inNetns(netns, 'ip', ['-o', 'link']).out), 10_000, () => inNetns(netns, 'ip', ['-o', 'link']).out);
    await s.removePodSandbox({ id: 'nri-run' });
  });

  it('older NRI: the same through StateChange events', async () => {
    const netns = d.makePodNetns('nri-sc');
    await s.stateChange('RUN_POD_SANDBOX', { id: 'nri-sc', name: 'sc', namespace: 'nri', netns });
    assert.deepEqual(await pods(), ['nri-sc']);
    await s.stateChange('STOP_POD_SANDBOX', { id: 'nri-sc' });
    assert.deepEqual(await pods(), []);
    await s.stateChange('REMOVE_POD_SANDBOX', { id: 'nri-sc' });
  });

  it('after the CNI path attached a sandbox, NRI adds uid, labels, annotations and handler without wiring twice', async () => {
    const netns = d.makePodNetns('nri-cni');
    const add = cni('ADD', { CNI_CONTAINERID: 'nri-cni', CNI_NETNS: netns, CNI_IFNAME: 'eth0', CNI_ARGS: 'K8S_POD_NAMESPACE=nri;K8S_POD_NAME=both' }, { cniVersion: '1.0.0', name: 'kni', socket: d.cniSocket });
    assert.equal(add.code, 0, add.raw);
    await s.runPodSandbox({ id: 'nri-cni', name: 'both', namespace: 'nri', uid: 'uid-both', labels: { tier: 'db' }, annotations: { x: 'y' }, runtimeHandler: 'runc', netns });
    const p = await d.rt().GetPod({ sandbox_id: 'nri-cni' });
    assert.equal(p.pod.uid, 'uid-both');
    assert.deepEqual(p.labels, { tier: 'db' });
    assert.deepEqual(p.annotations, { x: 'y' });
    assert.equal(p.runtime_handler, 'runc');
    assert.equal(p.interfaces[0].addresses[0].address, add.out.ips[0].address.split('/')[0]);
    assert.equal(d.nodeLinks().filter((l) => /^kni[0-9a-f]{12}$/.test(l)).length, 1);
    await s.stopPodSandbox({ id: 'nri-cni' });
  });

  it('refuses what it cannot do with a precise status, and UNIMPLEMENTED for what it does not serve', async () => {
    await assert.rejects(s.runPodSandbox({ id: 'bad', netns: '/etc/hostname' }), (e: TtrpcError) => e.code === STATUS.INVALID_ARGUMENT && /outside the allowed netns roots/.test(e.message));
    await assert.rejects(s.rawCall(PLUGIN_SERVICE, 'CreateContainer', Buffer.alloc(0)), (e: TtrpcError) => e.code === STATUS.UNIMPLEMENTED);
    await assert.rejects(s.rawCall('some.Other', 'Thing', Buffer.alloc(0)), (e: TtrpcError) => e.code === STATUS.UNIMPLEMENTED);
    await s.call('Shutdown', 'Empty', {});
    // A pod sharing the host netns has nothing to wire.
    await s.runPodSandbox({ id: 'hostnet', name: 'h', namespace: 'nri' });
    assert.deepEqual(await pods(), []);
  });

  it('reconnects after a runtime restart, and Synchronize releases what the runtime no longer has', async () => {
    const keep = { id: 'nri-keep', name: 'keep', namespace: 'nri', netns: d.makePodNetns('nri-keep') };
    const gone = { id: 'nri-gone', name: 'gone', namespace: 'nri', netns: d.makePodNetns('nri-gone') };
    await s.runPodSandbox(keep);
    await s.runPodSandbox(gone);
    const from = d.output.length;
    await rt.stop();
    rt.pods = [keep]; // "gone" was removed while the runtime (and its NRI) was down
    await rt.listen();
    s = await rt.nextSession();
    await waitFor(async () => (await pods()).length === 1, 20_000, () => "nri-gone was not released");
    assert.deepEqual(await pods(), ['nri-keep']);
    assert.match(d.output.slice(from), /released sandboxes the runtime no longer has.*nri-gone/);
    await s.stopPodSandbox(keep);
  });

  it('runs as a pre-registered plugin with its socket on fd 3', async () => {
    const g = await TestDaemon.start({ bridge: 'knifd3', ranges: ['10.96.0.0/24'] });
    try {
      await g.stop();
      // What containerd does for /opt/nri/plugins/NN-kni: a socketpair on fd 3 and NRI_PLUGIN_* only.
      const child = spawn('nsenter', [`--net=${g.nodeNetns}`, process.execPath, path.join(packageRoot(), 'dist/plugin/main.js'), '--config', g.configFile, '--socket', g.socket, '--state-dir', g.stateDir], {
        stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
        env: { NRI_PLUGIN_NAME: 'kni', NRI_PLUGIN_IDX: '05', NRI_PLUGIN_SOCKET: '3' },
      });
      g.proc = child;
      child.stdout!.on('data', (b) => (g.output += b));
      child.stderr!.on('data', (b) => (g.output += b));
      const fake = new FakeNriRuntime(`${g.dir}/unused.sock`);
      const sess = fake.adopt(child.stdio[3] as Duplex);
      await sess.ready;
      assert.deepEqual(sess.registered, { pluginName: 'kni', pluginIdx: '05', NRIVersion: '' });
      const netns = g.makePodNetns('fd3');
      await sess.runPodSandbox({ id: 'fd3-pod', netns });
      assert.match(inNetns(netns, 'ip', ['-o', 'addr']).out, /inet 10\.96\.0\.\d+\//);
      await sess.stopPodSandbox({ id: 'fd3-pod' });
      sess.close();
    } finally {
      g.cleanup();
    }
  });

  it('warns when a vm sandbox arrives only through NRI (too late for Kata)', async () => {
    const from = d.output.length;
    await s.runPodSandbox({ id: 'nri-kata', name: 'k', namespace: 'nri', runtimeHandler: 'kata', netns: d.makePodNetns('nri-kata') });
    assert.match(d.output.slice(from), /vm sandbox reached kni only through NRI.*"sandbox":"nri-kata"/);
    assert.equal((await d.rt().GetPod({ sandbox_id: 'nri-kata' })).kind, 'vm');
    await s.stopPodSandbox({ id: 'nri-kata' });
  });

  it('keeps encode/decode in step with the proto', () => {
    assert.equal(encode('ConfigureResponse', { events: 7 }).toString('hex'), '1007');
  });
});
