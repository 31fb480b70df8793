// The state dir: one daemon per dir, and a dir that is full or read-only never leaves a pod in
// a state that a retry, a reconcile or a restart would turn into something else.
import * as grpc from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '../plugin/client/clients';
import { packageRoot } from '../plugin/server/protos';
import { rejectsWith } from './helpers/expect';
import { inNetns, RUN, sh, trySh } from './helpers/sh';
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
    let d: TestDaemon;
    let rt: Client;
    let fillers = 0;

    /** Uses every free inode of the state fs, then frees n of them. */
    function leaveFreeInodes(n: number): void {
      for (;;) {
        try {
          fs.writeFileSync(`${mnt}/filler${fillers}`, '');
          fillers++;
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code !== 'ENOSPC') throw e;
          break;
        }
      }
      for (let i = 0; i < n; i++) fs.rmSync(`${mnt}/filler${--fillers}`);
    }
    const freeAll = () => {
      while (fillers > 0) fs.rmSync(`${mnt}/filler${--fillers}`);
    };

    before(async () => {
      fs.mkdirSync(mnt, { recursive: true });
      sh('mount', ['-t', 'tmpfs', '-o', 'size=4m,nr_inodes=64', 'kni-test-state', mnt]);
      d = await TestDaemon.start({}, { args: ['--state-dir', `${mnt}/state`] });
      rt = d.rt();
    });
    after(() => {
      d?.cleanup();
      trySh('umount', ['-l', mnt]);
      fs.rmSync(mnt, { recursive: true, force: true });
    });

    it('no room for the record: UNAVAILABLE, nothing wired, no address taken', async () => {
      const netns = d.makePodNetns('full0');
      leaveFreeInodes(0);
      try {
        await rejectsWith(rt.Attach({ sandbox_id: 'full0', netns_path: netns }), S.UNAVAILABLE, /cannot record sandbox full0 in the state dir/);
      } finally {
        freeAll();
      }
      assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/);
      assert.equal((await rt.GetIPAMStatus({})).ranges[0].used, '0');
    });

    it('room for the record but not for the commit: the attach is undone before the error, and a retry wires it for good', async () => {
      const netns = d.makePodNetns('full1');
      leaveFreeInodes(1); // the record takes it; the commit mark then finds none
      try {
        await rejectsWith(rt.Attach({ sandbox_id: 'full1', netns_path: netns }), S.UNAVAILABLE, /cannot commit sandbox full1 .*the attach was undone/);
        assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/, 'the pod was left wired');
        await rejectsWith(rt.GetPod({ sandbox_id: 'full1' }), S.NOT_FOUND, /not attached/);
        assert.deepEqual(await d.kniVethsSettled(0), []);
        assert.equal((await rt.GetIPAMStatus({})).ranges[0].used, '0');
      } finally {
        freeAll();
      }
      await rt.Attach({ sandbox_id: 'full1', netns_path: netns });
      // Committed: a restart keeps it (an uncommitted one would be rolled back).
      await d.restart('SIGKILL');
      rt = d.rt();
      assert.deepEqual((await rt.Check({ sandbox_id: 'full1' })).problems, []);
      await rt.Detach({ sandbox_id: 'full1' });
    });

    it('a read-only state dir during Detach: UNAVAILABLE, the pod keeps its network, reconcile leaves it, and Detach works once writable', async () => {
      const netns = d.makePodNetns('ro');
      const pod = await rt.Attach({ sandbox_id: 'ro', netns_path: netns });
      // The records' dir read-only (the lock file, open for writing, keeps the fs itself rw).
      const records = `${mnt}/state/sandboxes`;
      sh('mount', ['--bind', records, records]);
      sh('mount', ['-o', 'remount,bind,ro', records]);
      try {
        const from = d.output.length;
        await rejectsWith(rt.Detach({ sandbox_id: 'ro' }), S.UNAVAILABLE, /cannot record the detach of sandbox ro .*nothing was changed/);
        await waitFor(() => /"level":"warn","msg":"detach failed","sandbox":"ro",.*"code":"UNAVAILABLE"/.test(d.output.slice(from)), 10_000, () => 'no "detach failed" line');
        assert.deepEqual((await rt.Check({ sandbox_id: 'ro' })).problems, [], 'the refused detach changed the pod');
        const r = await rt.Reconcile({});
        assert.deepEqual([r.repaired_sandbox_ids, r.released_sandbox_ids], [[], []]);
        assert.equal((await rt.GetPod({ sandbox_id: 'ro' })).interfaces[0].addresses[0].address, pod.interfaces[0].addresses[0].address);
      } finally {
        sh('umount', [records]);
      }
      assert.equal((await rt.Detach({ sandbox_id: 'ro' })).released, true);
      assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/);
    });

    it('a detach cut short after its mark is finished at the next start, never wired again', async () => {
      const netns = d.makePodNetns('half');
      await rt.Attach({ sandbox_id: 'half', netns_path: netns });
      await d.stop('SIGKILL');
      // What a kill -9 between the detaching mark and the kernel work leaves.
      fs.writeFileSync(`${mnt}/state/sandboxes/half.detaching`, '');
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
