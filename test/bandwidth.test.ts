// Bandwidth limits on the built-in network (the kubernetes.io/ingress-bandwidth and
// egress-bandwidth annotations; the CNI bandwidth capability reaches the same code): the
// limit is measured with a transfer each way, the shaping lives in the node netns only, and
// nothing of it outlives the pod — also after a crash that missed the detach.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as grpc from '@grpc/grpc-js';
import { Client } from '../plugin/client/clients';
import { rejectsWith } from './helpers/expect';
import { inNetns, RUN, sh, trySh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

const MB = 1024 * 1024;

describe('bandwidth limits (real kernel, tc)', () => {
  let d: TestDaemon;
  let rt: Client;

  before(async () => {
    d = await TestDaemon.start();
    rt = d.rt();
  });
  after(() => d?.cleanup());

  async function pod(id: string, annotations: Record<string, string> = {}): Promise<{ netns: string; ip: string; hostVeth: string }> {
    const netns = d.makePodNetns(id);
    const p = await rt.Attach({ sandbox_id: id, netns_path: netns, pod: { name: id, namespace: 'default', uid: `u-${id}` }, annotations });
    return { netns, ip: p.interfaces[0].addresses[0].address, hostVeth: p.interfaces[0].host_interface };
  }

  /** Seconds to push `bytes` from one netns to a listener in another. */
  async function transfer(fromNetns: string, toNetns: string, toIp: string, port: number, bytes: number): Promise<number> {
    const listener = spawn('nsenter', [`--net=${toNetns}`, '/bin/busybox', 'nc', '-l', '-p', String(port)], { stdio: ['pipe', 'ignore', 'ignore'] }); // stdin open: nc -l quits at its EOF
    const done = new Promise((r) => listener.once('exit', r));
    try {
      await waitFor(() => inNetns(toNetns, 'ss', ['-ltn']).out.includes(`:${port}`), 10_000, () => 'listener never listened');
      const t0 = process.hrtime.bigint();
      const r = inNetns(fromNetns, '/bin/busybox', ['sh', '-c', `/bin/busybox dd if=/dev/zero bs=65536 count=${bytes / 65536} 2>/dev/null | /bin/busybox nc ${toIp} ${port}`]);
      const s = Number(process.hrtime.bigint() - t0) / 1e9;
      assert.ok(r.ok, r.out);
      return s;
    } finally {
      listener.kill('SIGKILL');
      await done;
    }
  }

  it('8 Mbit/s each way: a 4 MiB transfer out of the pod and one into it each take over 2 s; the shaping is all in the node netns', async function () {
    this.timeout(120_000);
    const p = await pod('bw-a', { 'kubernetes.io/egress-bandwidth': '8M', 'kubernetes.io/ingress-bandwidth': '8M' });
    const qdiscs = sh('tc', ['-n', d.nodeNetnsName, 'qdisc', 'show', 'dev', p.hostVeth]);
    assert.match(qdiscs, /qdisc tbf 1: root .*rate 8Mbit/);
    assert.match(qdiscs, /qdisc ingress ffff:/);
    const ifb = sh('ip', ['-n', d.nodeNetnsName, '-o', 'link', 'show', 'type', 'ifb']).trim();
    assert.match(ifb, /kbw[0-9a-f]{12}/);
    assert.match(sh('tc', ['-n', d.nodeNetnsName, 'qdisc', 'show', 'dev', ifb.split(':')[1].trim().split('@')[0]]), /tbf 1: root .*rate 8Mbit/);
    assert.doesNotMatch(inNetns(p.netns, 'tc', ['qdisc', 'show', 'dev', 'eth0']).out, /tbf/, 'shaping inside the pod netns: the pod could undo it');
    const node = d.nodeNetns;
    const out = await transfer(p.netns, node, '10.244.0.1', 5001, 4 * MB);
    const into = await transfer(node, p.netns, p.ip, 5002, 4 * MB);
    // 4 MiB at 8 Mbit/s is ~4.2 s (less the burst): a lower bound only, so a busy machine passes.
    assert.ok(out > 2, `egress: 4 MiB in ${out.toFixed(2)} s, faster than 8 Mbit/s allows\n${sh('tc', ['-n', d.nodeNetnsName, '-s', 'filter', 'show', 'dev', p.hostVeth, 'ingress'])}\n${sh('tc', ['-n', d.nodeNetnsName, '-s', 'qdisc', 'show'])}`);
    assert.ok(into > 2, `ingress: 4 MiB in ${into.toFixed(2)} s, faster than 8 Mbit/s allows`);

    await rt.Detach({ sandbox_id: 'bw-a' });
    assert.equal(sh('ip', ['-n', d.nodeNetnsName, '-o', 'link', 'show', 'type', 'ifb']).trim(), '', 'ifb left behind');
  });

  it('a pod without the annotations gets no qdisc and no ifb', async () => {
    const p = await pod('bw-none');
    assert.doesNotMatch(sh('tc', ['-n', d.nodeNetnsName, 'qdisc', 'show', 'dev', p.hostVeth]), /tbf|ingress/);
    assert.equal(sh('ip', ['-n', d.nodeNetnsName, '-o', 'link', 'show', 'type', 'ifb']).trim(), '');
    await rt.Detach({ sandbox_id: 'bw-none' });
  });

  it('a bad annotation is refused with a precise error and takes nothing', async () => {
    for (const [v, re] of [['fast', /"fast" is not a quantity like 10M or 1Gi/], ['10', /outside 1k to 1P/], ['2000P', /outside 1k to 1P/]] as const) {
      await rejectsWith(rt.Attach({ sandbox_id: 'bw-bad', netns_path: d.makePodNetns(`bw-bad-${v}`), pod: { name: 'x', namespace: 'default', uid: 'u' }, annotations: { 'kubernetes.io/egress-bandwidth': v } }), grpc.status.INVALID_ARGUMENT, re);
    }
    assert.equal((await rt.GetIPAMStatus({})).ranges[0].used, '0');
  });

  it('after a crash: a shaped pod whose netns went meanwhile is released with its ifb; an ifb no record owns is removed', async () => {
    const p = await pod('bw-crash', { 'kubernetes.io/egress-bandwidth': '10M' });
    await d.stop('SIGKILL');
    sh('ip', ['netns', 'del', p.netns.split('/').pop()!]);
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'add', 'kbw0123456789ab', 'type', 'ifb']);
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', 'kbw0123456789ab', 'alias', `kni-bw:${RUN}-gone`]);
    d.closeClients();
    await d.launch();
    rt = d.rt();
    await waitFor(() => sh('ip', ['-n', d.nodeNetnsName, '-o', 'link', 'show', 'type', 'ifb']).trim() === '', 20_000, () => sh('ip', ['-n', d.nodeNetnsName, '-o', 'link', 'show', 'type', 'ifb']));
    assert.equal((await rt.ListPods({})).pods.length, 0);
    trySh('ip', ['-n', d.nodeNetnsName, 'link', 'del', 'kbw0123456789ab']);
  });
});
