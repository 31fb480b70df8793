// The state dir: one daemon per dir, and a dir that is full or read-only never leaves a pod in
// a state that a retry, a reconcile or a restart would turn into something else.
import * as grpc from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '../plugin/client/clients';
import { extensionService, packageRoot } from '../plugin/server/protos';
import { rejectsWith } from './helpers/expect';
import { inNetns, RUN, sh, trySh } from './helpers/sh';
import { stateRecords, writeStateRecord } from './helpers/state-records';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

const S = grpc.status;

describe('hardening: state dir', () => {
  it('a second daemon on the same state dir, or on a live CNI socket, refuses to start and changes nothing', async () => {
    const d = await TestDaemon.start();
    try {
      const rt = d.rt();
      const netns = d.makePodNetns('lockpod');
      await rt.Attach({ sandbox_id: 'lockpod', netns_path: netns });
      const second = (config: string, args: string[]) =>
        spawnSync('nsenter', [`--net=${d.nodeNetns}`, process.execPath, path.join(packageRoot(), 'dist/plugin/main.js'), '--config', config, ...args], { encoding: 'utf8', timeout: 30_000 });
      // Its own sockets (gRPC and CNI), the first daemon's state dir.
      const ownCni = `${d.dir}/config-own-cni.json`;
      const conf = JSON.parse(fs.readFileSync(d.configFile, 'utf8'));
      fs.writeFileSync(ownCni, JSON.stringify({ ...conf, cni: { ...conf.cni, socket: `${d.dir}/other-cni.sock` } }));
      const sameDir = second(ownCni, ['--socket', `${d.dir}/other.sock`, '--state-dir', d.stateDir]);
      assert.equal(sameDir.status, 1, sameDir.stderr);
      assert.match(sameDir.stderr, new RegExp(`state dir ${d.stateDir} is in use by another kni-runtime \\(pid ${d.proc!.pid}\\)`));
      const sameCni = second(d.configFile, ['--socket', `${d.dir}/other2.sock`, '--state-dir', `${d.dir}/other-state`]);
      assert.equal(sameCni.status, 1, sameCni.stderr);
      assert.match(sameCni.stderr, new RegExp(`another process is serving on ${d.cniSocket}`));
      // The first daemon is untouched: its pod, its sockets, its veth.
      assert.deepEqual((await rt.Check({ sandbox_id: 'lockpod' })).problems, []);
      assert.ok(fs.existsSync(d.cniSocket));
      assert.equal(d.kniVeths().length, 1);
      await rt.Detach({ sandbox_id: 'lockpod' });
    } finally {
      d.cleanup();
    }
  });

  describe('on a small tmpfs', () => {
    const mnt = `/tmp/${RUN}-statefs`;
    const filler = `${mnt}/filler`;
    let d: TestDaemon;
    let rt: Client;
    let ext: grpc.Server | undefined;

    /**
     * Uses every free page of the state fs. The record logs append to open files, so only a
     * write that needs a new page fails: the pods here carry 12 KiB of annotations, and each of
     * their records needs at least three new pages.
     */
    function fillSpace(): void {
      const fd = fs.openSync(filler, 'a');
      try {
        for (const chunk of [Buffer.alloc(65536), Buffer.alloc(4096)]) {
          for (;;) {
            try {
              fs.writeSync(fd, chunk);
            } catch (e) {
              if ((e as NodeJS.ErrnoException).code !== 'ENOSPC') throw e;
              break;
            }
          }
        }
      } finally {
        fs.closeSync(fd);
      }
    }
    const freeSpace = () => fs.rmSync(filler, { force: true });
    const bigPod = (id: string, netns: string) => ({ sandbox_id: id, netns_path: netns, annotations: { 'test/padding': 'x'.repeat(12 * 1024) } });

    before(async () => {
      fs.mkdirSync(mnt, { recursive: true });
      sh('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'kni-test-state', mnt]);
      d = await TestDaemon.start({}, { args: ['--state-dir', `${mnt}/state`] });
      rt = d.rt();
    });
    after(() => {
      ext?.forceShutdown();
      d?.cleanup();
      trySh('umount', ['-l', mnt]);
      fs.rmSync(mnt, { recursive: true, force: true });
    });

    it('no room for the record: UNAVAILABLE, nothing wired, no address taken', async () => {
      const netns = d.makePodNetns('full0');
      fillSpace();
      try {
        await rejectsWith(rt.Attach(bigPod('full0', netns)), S.UNAVAILABLE, /cannot record sandbox full0 in the state dir/);
      } finally {
        freeSpace();
      }
      assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/);
      assert.equal((await rt.GetIPAMStatus({})).ranges[0].used, '0');
    });

    it('room for the record but not for the commit: the attach is undone before the error, and a retry wires it for good', async () => {
      // An extension (called after the wiring, before the commit) fills the fs in between.
      ext = new grpc.Server();
      ext.addService(extensionService().service, {
        Check: (_call: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, { healthy: true }),
        PodAttached: (call: grpc.ServerUnaryCall<{ sandbox_id: string }, unknown>, cb: grpc.sendUnaryData<unknown>) => {
          if (call.request.sandbox_id === 'full1' && !fs.existsSync(filler)) fillSpace();
          cb(null, {});
        },
        PodDetached: (_call: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, {}),
      });
      const extSocket = `${d.dir}/filler-ext.sock`;
      await new Promise<void>((resolve, reject) => ext!.bindAsync(`unix://${extSocket}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
      await rt.RegisterExtension({ name: 'filler', socket: extSocket });
      const netns = d.makePodNetns('full1');
      try {
        await rejectsWith(rt.Attach(bigPod('full1', netns)), S.UNAVAILABLE, /cannot commit sandbox full1 .*the attach was undone/);
        assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/, 'the pod was left wired');
        await rejectsWith(rt.GetPod({ sandbox_id: 'full1' }), S.NOT_FOUND, /not attached/);
        assert.deepEqual(await d.kniVethsSettled(0), []);
        assert.equal((await rt.GetIPAMStatus({})).ranges[0].used, '0');
      } finally {
        freeSpace();
      }
      await rt.UnregisterExtension({ name: 'filler' });
      await rt.Attach(bigPod('full1', netns));
      // Committed: a restart keeps it (an uncommitted one would be rolled back).
      await d.restart('SIGKILL');
      rt = d.rt();
      assert.deepEqual((await rt.Check({ sandbox_id: 'full1' })).problems, []);
      await rt.Detach({ sandbox_id: 'full1' });
    });

    it('a full state dir during Detach: UNAVAILABLE, the pod keeps its network, reconcile leaves it, and Detach works once there is room', async () => {
      const netns = d.makePodNetns('ro');
      const pod = await rt.Attach(bigPod('ro', netns));
      fillSpace();
      try {
        const from = d.output.length;
        await rejectsWith(rt.Detach({ sandbox_id: 'ro' }), S.UNAVAILABLE, /cannot record the detach of sandbox ro .*nothing was changed/);
        await waitFor(() => /"level":"warn","msg":"detach failed","sandbox":"ro",.*"code":"UNAVAILABLE"/.test(d.output.slice(from)), 10_000, () => 'no "detach failed" line');
        assert.deepEqual((await rt.Check({ sandbox_id: 'ro' })).problems, [], 'the refused detach changed the pod');
        const r = await rt.Reconcile({});
        assert.deepEqual([r.repaired_sandbox_ids, r.released_sandbox_ids], [[], []]);
        assert.equal((await rt.GetPod({ sandbox_id: 'ro' })).interfaces[0].addresses[0].address, pod.interfaces[0].addresses[0].address);
      } finally {
        freeSpace();
      }
      assert.equal((await rt.Detach({ sandbox_id: 'ro' })).released, true);
      assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/);
    });

    it('kni restarted on a full state dir: it serves from what is on disk, refuses new attaches naming ENOSPC, and compacts its log once there is room', async () => {
      const log = `${mnt}/state/sandboxes.log`;
      const keep = d.makePodNetns('keep');
      await rt.Attach(bigPod('keep', keep));
      // Churn, so the log holds lines a compaction drops.
      for (let i = 0; i < 3; i++) {
        await rt.Attach({ sandbox_id: `churn${i}`, netns_path: d.makePodNetns(`churn${i}`) });
        await rt.Detach({ sandbox_id: `churn${i}` });
      }
      const linesBefore = fs.readFileSync(log, 'utf8').trim().split('\n').length;
      await d.stop('SIGKILL');
      d.closeClients();
      fillSpace();
      try {
        const from = d.output.length;
        await d.launch();
        rt = d.rt();
        assert.match(d.output.slice(from), /"msg":"the state dir has no room: kni serves from the records on disk/);
        assert.equal((await rt.GetNode({})).ready, true);
        assert.deepEqual((await rt.Check({ sandbox_id: 'keep' })).problems, []);
        assert.deepEqual((await rt.ListPods({})).pods.map((p: any) => p.sandbox_id), ['keep']);
        await rejectsWith(rt.Attach(bigPod('late', d.makePodNetns('late'))), S.UNAVAILABLE, /cannot record sandbox late in the state dir: .*ENOSPC/);
      } finally {
        freeSpace();
      }
      await rt.Attach(bigPod('late', d.makePodNetns('late2')));
      const lines = fs.readFileSync(log, 'utf8').trim().split('\n');
      assert.ok(lines.length === 2 && linesBefore > 2, `the log was not compacted: ${linesBefore} lines before, ${lines.length} after`);
      for (const id of ['keep', 'late']) await rt.Detach({ sandbox_id: id });
    });

    it('a detach cut short after its record is written is finished at the next start, never wired again', async () => {
      const netns = d.makePodNetns('half');
      await rt.Attach({ sandbox_id: 'half', netns_path: netns });
      await d.stop('SIGKILL');
      // What a kill -9 between the record of the detach and its kernel work leaves.
      writeStateRecord(`${mnt}/state`, 'sandboxes', 'half', { ...stateRecords(`${mnt}/state`, 'sandboxes').get('half'), phase: 'detaching' });
      d.closeClients();
      const from = d.output.length;
      await d.launch();
      rt = d.rt();
      await rejectsWith(rt.GetPod({ sandbox_id: 'half' }), S.NOT_FOUND, /not attached/);
      assert.match(d.output.slice(from), /rolling back a detach interrupted by a restart.*"sandbox":"half"/);
      assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/);
      assert.equal((await rt.GetIPAMStatus({})).ranges[0].used, '0');
    });
  });

  it('DeleteNetwork with only a netns path releases the sandbox attached in it at once', async () => {
    const d = await TestDaemon.start();
    try {
      const kni = d.kni();
      const rt = d.rt();
      const p = (await kni.CreateNetwork({ name: 'dn', namespace: 'default' })).netns_path;
      await kni.AttachInterface({ id: 'dn', name: 'dn', namespace: 'default', isolation: { path: p } });
      assert.equal((await rt.GetIPAMStatus({})).ranges[0].used, '1');
      await kni.DeleteNetwork({ netns_path: p });
      await rejectsWith(rt.GetPod({ sandbox_id: 'dn' }), S.NOT_FOUND, /not attached/);
      assert.equal((await rt.GetIPAMStatus({})).ranges[0].used, '0');
      assert.equal(fs.existsSync(p), false);
    } finally {
      d.cleanup();
    }
  });
});
