// A pod is never wired into the node's netns and no path makes kni hang: paths swapped after
// they were checked, recorded paths that now name another netns, FIFOs, and reconcile racing
// an attach of the veth it is about to delete.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { hostVethName } from '../plugin/core/network-runtime';
import { Client } from '../plugin/client/clients';
import { rejectsWith } from './helpers/expect';
import { RUN, sh, trySh } from './helpers/sh';
import { removeStateRecord, stateRecords, writeStateRecord } from './helpers/state-records';
import { TestDaemon } from './helpers/test-daemon';
import * as grpc from '@grpc/grpc-js';
import { waitFor } from './helpers/wait';

describe('hardening: netns paths', () => {
  let d: TestDaemon;
  let rt: Client;
  const nodeHasEth0 = () => trySh('ip', ['-n', d.nodeNetnsName, 'link', 'show', 'eth0']).ok;
  /** A process whose netns is the node's (the daemon's own netns): what a reused pid may name. */
  let holder: ReturnType<typeof spawn> | undefined;
  const nodePidHolder = (): number => {
    holder ??= spawn('nsenter', [`--net=${d.nodeNetns}`, 'sleep', '600'], { stdio: 'ignore' });
    return holder.pid!;
  };
  const nodeRoutes = () => sh('ip', ['-n', d.nodeNetnsName, 'route', 'show', 'default']) + sh('ip', ['-6', '-n', d.nodeNetnsName, 'route', 'show', 'default']);

  before(async () => {
    d = await TestDaemon.start();
    rt = d.rt();
    // The node has a default route of its own, as a real node does: it must survive everything here.
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'add', `${RUN}up`, 'type', 'veth', 'peer', 'name', `${RUN}uq`]);
    sh('ip', ['-n', d.nodeNetnsName, 'addr', 'add', '192.0.2.2/24', 'dev', `${RUN}up`]);
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', `${RUN}up`, 'up']);
    sh('ip', ['-n', d.nodeNetnsName, 'route', 'add', 'default', 'via', '192.0.2.1']);
  });
  after(() => {
    holder?.kill('SIGKILL');
    d?.cleanup();
  });

  it('a symlink switched between a pod netns and the daemon netns during 300 attaches never wires the node', async () => {
    const pod = d.makePodNetns('swpod');
    const link = `${d.netnsDir}/${RUN}-swlink`;
    const daemonNetns = `/proc/${d.proc!.pid}/ns/net`;
    fs.symlinkSync(pod, link);
    const before = nodeRoutes();
    // A separate process flips the link as fast as it can for the whole run.
    const flipper = spawn('bash', ['-c', `while :; do ln -sfn ${daemonNetns} ${link}.n && mv -T ${link}.n ${link}; ln -sfn ${pod} ${link}.n && mv -T ${link}.n ${link}; done`], { stdio: 'ignore' });
    let wired = 0;
    const refusals = new Map<string, number>();
    try {
      for (let i = 0; i < 300; i++) {
        try {
          await rt.Attach({ sandbox_id: `sw${i}`, netns_path: link });
          wired++;
          assert.equal(nodeHasEth0(), false, `attach ${i} put eth0 in the node netns`);
          await rt.Detach({ sandbox_id: `sw${i}` });
        } catch (e) {
          const why = (e as grpc.ServiceError).details.replace(/sw\d+/g, '').replace(/\/proc\/\d+/, '/proc/PID');
          refusals.set(why, (refusals.get(why) ?? 0) + 1);
        }
      }
    } finally {
      flipper.kill('SIGKILL');
      fs.rmSync(link, { force: true });
      fs.rmSync(`${link}.n`, { force: true });
    }
    assert.ok(wired > 0, `no attach went through the pod side of the link: ${[...refusals.keys()].join(' | ')}`);
    assert.ok(refusals.size > 0, 'no attach met the daemon side of the link: the race was not exercised');
    for (const why of refusals.keys()) assert.match(why, /outside the allowed netns roots|node's own network namespace/);
    assert.equal(nodeHasEth0(), false);
    assert.equal(nodeRoutes(), before, 'the node routes changed');
  });

  it('a recorded path re-pointed at the daemon netns (ip netns attach) is released by reconcile, never entered', async () => {
    const name = `${RUN}-repoint`;
    sh('ip', ['netns', 'add', name]);
    try {
      const p = `/run/netns/${name}`;
      await rt.Attach({ sandbox_id: 'repoint', netns_path: p });
      sh('ip', ['netns', 'del', name]);
      sh('ip', ['netns', 'attach', name, String(d.proc!.pid)]);
      const before = nodeRoutes();
      const r = await rt.Reconcile({});
      assert.deepEqual(r.released_sandbox_ids, ['repoint']);
      assert.match(r.findings.join('\n'), /no longer names the sandbox's netns|now names another network namespace/);
      assert.equal(nodeHasEth0(), false);
      assert.equal(nodeRoutes(), before);
      await rejectsWith(rt.GetPod({ sandbox_id: 'repoint' }), grpc.status.NOT_FOUND, /not attached/);
      assert.deepEqual(await d.kniVethsSettled(0), []);
    } finally {
      trySh('ip', ['netns', 'del', name]);
    }
  });

  it('a /proc/<pid>/ns/net record whose pid names another netns after a restart (pid reused) is released at start, the node untouched', async () => {
    const pod = d.makePodNetns('pidreuse');
    const sleeper = spawn('nsenter', [`--net=${pod}`, 'sleep', '600'], { stdio: 'ignore' });
    try {
      // Until nsenter has entered the pod netns, the pid names the test's own (the host's) netns.
      await waitFor(() => fs.statSync(`/proc/${sleeper.pid}/ns/net`).ino === fs.statSync(pod).ino, 10_000, () => 'sleeper not in the pod netns yet');
      const viaPid = `/proc/${sleeper.pid}/ns/net`;
      await rt.Attach({ sandbox_id: 'pidreuse', netns_path: viaPid });
      await d.stop('SIGKILL');
      // After a reboot or a restart the pid may belong to anyone: here, to the node's netns.
      const rec = stateRecords(d.stateDir, 'sandboxes').get('pidreuse');
      const reused = nodePidHolder();
      await waitFor(() => fs.statSync(`/proc/${reused}/ns/net`).ino === fs.statSync(d.nodeNetns).ino, 10_000, () => 'the stand-in is not in the node netns');
      writeStateRecord(d.stateDir, 'sandboxes', 'pidreuse', { ...rec, netnsPath: `/proc/${reused}/ns/net` });
      const before = nodeRoutes();
      d.closeClients();
      const from = d.output.length;
      await d.launch();
      rt = d.rt();
      assert.match(d.output.slice(from), /reconcile: sandbox pidreuse: netns path .* (now names another network namespace|is the node's own)/);
      await rejectsWith(rt.GetPod({ sandbox_id: 'pidreuse' }), grpc.status.NOT_FOUND, /not attached/);
      assert.equal(nodeHasEth0(), false);
      assert.equal(nodeRoutes(), before);
    } finally {
      sleeper.kill('SIGKILL');
    }
  });

  it('a FIFO is refused at once, in an attach and as a recorded path (reconcile does not hang)', async () => {
    const fifo = `${d.netnsDir}/${RUN}-fifo`;
    sh('mkfifo', [fifo]);
    try {
      await rejectsWith(rt.Attach({ sandbox_id: 'fifo', netns_path: fifo }, 5000), grpc.status.INVALID_ARGUMENT, /is not a network namespace/);
    } finally {
      fs.rmSync(fifo, { force: true });
    }
    const name = `${RUN}-tofifo`;
    sh('ip', ['netns', 'add', name]);
    await rt.Attach({ sandbox_id: 'tofifo', netns_path: `/run/netns/${name}` });
    sh('ip', ['netns', 'del', name]);
    sh('mkfifo', [`/run/netns/${name}`]);
    try {
      const r = await rt.Reconcile({}, 5000);
      assert.deepEqual(r.released_sandbox_ids, ['tofifo']);
      await rejectsWith(rt.GetPod({ sandbox_id: 'tofifo' }), grpc.status.NOT_FOUND, /not attached/);
    } finally {
      fs.rmSync(`/run/netns/${name}`, { force: true });
    }
  });

  it('reconcile racing the attach of a sandbox whose stale veth it is deleting leaves the new attach whole', async () => {
    for (let i = 0; i < 20; i++) {
      const id = `race${i}`;
      const veth = hostVethName(id, 'eth0');
      // A stale host end of this very sandbox, as a crash between DEL and ADD could leave.
      sh('ip', ['-n', d.nodeNetnsName, 'link', 'add', veth, 'type', 'veth', 'peer', 'name', `${RUN}p${i}`]);
      sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', veth, 'alias', `kni:${id}`]);
      const netns = d.makePodNetns(`race${i}`);
      const [, attached] = await Promise.all([rt.Reconcile({}), rt.Attach({ sandbox_id: id, netns_path: netns })]);
      assert.equal(attached.sandbox_id, id);
      const check = await rt.Check({ sandbox_id: id });
      assert.deepEqual(check.problems, [], `round ${i}: the fresh attach lost its veth`);
      await rt.Detach({ sandbox_id: id });
    }
  });

  it('a FIFO in an allowed root does not stop a restart that must scan the roots to rebuild a lost record', async () => {
    const netns = d.makePodNetns('lostrec');
    await rt.Attach({ sandbox_id: 'lostrec', netns_path: netns });
    await d.stop('SIGKILL');
    removeStateRecord(d.stateDir, 'sandboxes', 'lostrec');
    const fifo = `${d.netnsDir}/${RUN}-startfifo`;
    sh('mkfifo', [fifo]);
    try {
      d.closeClients();
      const from = d.output.length;
      await d.launch(); // fails if it does not serve within 15 s
      rt = d.rt();
      assert.equal((await rt.GetPod({ sandbox_id: 'lostrec' })).netns_path, netns);
      assert.match(d.output.slice(from), /sandbox record rebuilt from the kernel.*"sandbox":"lostrec"/);
      await rt.Detach({ sandbox_id: 'lostrec' });
    } finally {
      fs.rmSync(fifo, { force: true });
    }
  });
});
