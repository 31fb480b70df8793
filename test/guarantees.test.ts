// Guarantees the README and docs make that no other test checks, each checked where it holds:
// in the kernel, in the daemon's output, or at run time.
import assert from 'node:assert/strict';
import path from 'node:path';
import { Client } from '../plugin/client/clients';
import { packageRoot } from '../plugin/server/protos';
import { cni } from './helpers/cni-exec';
import { inNetns, sh, trySh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

describe('guarantees', () => {
  let d: TestDaemon;
  let rt: Client;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.67.0.0/24', 'fd00:67::/64'], reconcileSeconds: 1, unclaimedNetnsGraceSeconds: 1 });
    rt = d.rt();
  });
  after(() => d?.cleanup());

  // Its own daemon: reconcile lists the masquerade table with nft, and must not run in
  // the window watched (reconcile is never on a pod's path).
  describe('spawn-free pod path', () => {
    let sd: TestDaemon;
    before(async () => {
      sd = await TestDaemon.start({ ranges: ['10.69.0.0/24', 'fd00:69::/64'], reconcileSeconds: 3600 }, { script: path.join(packageRoot(), 'dist/test/helpers/spawn-reporting-daemon.js') });
    });
    after(() => sd?.cleanup());

    it('no process is spawned on the attach/detach path (gRPC, KNI POC, CNI), checked at run time', async () => {
      assert.match(sd.output, /"msg":"TEST spawn","fn":"execFile","command":"iptables"/, 'the spawn reporter did not see node setup: it proves nothing');
      const from = sd.output.length;
      const rt = sd.rt();
      const kni = sd.kni();
      for (let i = 0; i < 10; i++) {
        const netns = sd.makePodNetns(`nospawn${i}`);
        await rt.Attach({ sandbox_id: `ns-g${i}`, netns_path: netns });
        await rt.Detach({ sandbox_id: `ns-g${i}` });
        const made = (await kni.CreateNetwork({ name: `p${i}`, namespace: 'x' })).netns_path;
        await kni.AttachInterface({ id: `ns-k${i}`, name: `p${i}`, namespace: 'x', isolation: { path: made } });
        await kni.DetachInterface({ id: `ns-k${i}` });
        await kni.DeleteNetwork({ id: `ns-k${i}`, netns_path: made });
        const conf = { cniVersion: '1.0.0', name: 'kni', socket: sd.cniSocket };
        assert.equal(cni('ADD', { CNI_CONTAINERID: `ns-c${i}`, CNI_NETNS: netns, CNI_IFNAME: 'eth0' }, conf).code, 0);
        assert.equal(cni('DEL', { CNI_CONTAINERID: `ns-c${i}`, CNI_NETNS: netns, CNI_IFNAME: 'eth0' }, conf).code, 0);
      }
      assert.match(sd.output.slice(from), /"msg":"attach"/);
      assert.doesNotMatch(sd.output.slice(from), /TEST spawn/);
    });
  });

  it('pod veths have no IPv6 link-local address, on either end (in the kernel)', async () => {
    const netns = d.makePodNetns('nolinklocal');
    const p = await rt.Attach({ sandbox_id: 'nolinklocal', netns_path: netns });
    assert.equal(inNetns(netns, 'ip', ['-6', 'addr', 'show', 'dev', 'eth0', 'scope', 'link']).out.trim(), '');
    assert.match(inNetns(netns, 'ip', ['-6', 'addr', 'show', 'dev', 'eth0', 'scope', 'global']).out, /fd00:67::/, 'the global address is there (the check above is not vacuous)');
    assert.equal(sh('ip', ['-n', d.nodeNetnsName, '-6', 'addr', 'show', 'dev', p.interfaces[0].host_interface, 'scope', 'link']).trim(), '');
    await rt.Detach({ sandbox_id: 'nolinklocal' });
  });

  it('periodic reconcile re-wires a deleted veth and restores a deleted address without being asked', async () => {
    const netns = d.makePodNetns('periodic');
    const p = await rt.Attach({ sandbox_id: 'periodic', netns_path: netns });
    const v4 = p.interfaces[0].addresses[0].address;
    const v4p = `${v4}/${p.interfaces[0].addresses[0].prefix_length}`;
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'del', p.interfaces[0].host_interface]);
    await waitFor(async () => (await rt.Check({ sandbox_id: 'periodic' })).ok, 30_000, () => 'the veth was not re-wired by the periodic reconcile');
    inNetns(netns, 'ip', ['addr', 'del', v4p, 'dev', 'eth0']);
    assert.doesNotMatch(inNetns(netns, 'ip', ['-4', 'addr', 'show', 'dev', 'eth0']).out, new RegExp(v4.replace(/\./g, '\\.')));
    await waitFor(() => inNetns(netns, 'ip', ['-4', 'addr', 'show', 'dev', 'eth0']).out.includes(v4p), 30_000, () => 'the address was not restored');
    assert.equal((await rt.GetPod({ sandbox_id: 'periodic' })).interfaces[0].addresses[0].address, v4);
    await rt.Detach({ sandbox_id: 'periodic' });
  });

  it('periodic reconcile turns forwarding back on after something turned it off', async () => {
    const forwarding = () => inNetns(d.nodeNetns, 'sysctl', ['-n', 'net.ipv4.ip_forward']).out.trim();
    assert.ok(inNetns(d.nodeNetns, 'sysctl', ['-qw', 'net.ipv4.ip_forward=0']).ok);
    await waitFor(() => forwarding() === '1', 30_000, () => 'forwarding is still off');
    await waitFor(() => d.output.includes('net.ipv4.ip_forward is off'), 10_000, () => 'no reconcile finding names it');
  });

  it('the periodic sweep releases a CreateNetwork netns that no attach claimed', async () => {
    const { netns_path } = await d.kni().CreateNetwork({ name: 'orphan', namespace: 'x' });
    await waitFor(() => !trySh('test', ['-e', netns_path]).ok, 30_000, () => `${netns_path} is still pinned`);
  });

  it('log fields are capped at 1 KiB: a hostile megabyte is not a megabyte of log', async () => {
    const from = d.output.length;
    const r = cni('ADD', { CNI_CONTAINERID: 'x' }, { cniVersion: 'v'.repeat(5000), name: 'kni', socket: d.cniSocket });
    assert.equal(r.out.code, 1);
    await waitFor(() => d.output.slice(from).includes('"msg":"cni call failed"'), 10_000, () => 'no log line for the failed call');
    const line = d.output.slice(from).split('\n').find((l) => l.includes('"msg":"cni call failed"'));
    assert.ok(line, 'no log line for the failed call');
    assert.match(line!, /… \(\d+ chars\)/);
    assert.ok(line!.length < 2500, `a ${line!.length}-character log line`);
  });

  it('the log\'s reader gone (its pipe closed): kni goes on serving, says so once on stderr, and drops its lines', async () => {
    const ld = await TestDaemon.start({ ranges: ['10.66.0.0/24'] });
    try {
      const stdout = ld.proc!.stdout!;
      stdout.destroy(); // the read end closed: the daemon's next line meets EPIPE
      const lrt = ld.rt();
      for (let i = 0; i < 3; i++) {
        await lrt.Attach({ sandbox_id: `nolog${i}`, netns_path: ld.makePodNetns(`nolog${i}`) });
        await lrt.Detach({ sandbox_id: `nolog${i}` });
      }
      await waitFor(() => ld.output.includes('the log on stdout cannot be written'), 10_000, () => ld.output.slice(-2000));
      assert.equal(ld.output.split('\n').filter((l) => l.includes('the log on stdout cannot be written')).length, 1);
      assert.match(ld.output, /"level":"error".*"error":"EPIPE"/);
      assert.equal(ld.proc!.exitCode, null, 'the daemon ended');
      assert.equal((await lrt.GetNode({})).ready, true);
    } finally {
      await ld.cleanup();
    }
  });

  // Its own daemon: the one above reconciles every second and would repair the bridge first; no
  // repair on the kernel's notice either (that one: test/kernel-notices.test.ts).
  describe('with the default reconcile interval', () => {
    let bd: TestDaemon;
    let rt: Client;
    before(async () => {
      bd = await TestDaemon.start({ ranges: ['10.68.0.0/24', 'fd00:68::/64'], podLink: 'bridge', repairOnNotice: false }); // routed pods need no bridge port: an attach does not notice a missing bridge (reconcile does)
      rt = bd.rt();
    });
    after(() => bd?.cleanup());

    it('the bridge deleted behind kni\'s back: node not ready with the reason, then set up again by the next attach', async () => {
      sh('ip', ['-n', bd.nodeNetnsName, 'link', 'del', 'kni0']);
      const node = await rt.GetNode({});
      assert.equal(node.ready, false);
      assert.match(node.networks[0].reason, /bridge kni0 is missing/);
      const cniStatus = cni('STATUS', {}, { cniVersion: '1.1.0', name: 'kni', socket: bd.cniSocket });
      assert.equal(cniStatus.out.code, 50);
      await rt.Attach({ sandbox_id: 'rebridge', netns_path: bd.makePodNetns('rebridge') });
      assert.equal((await rt.GetNode({})).ready, true);
      assert.deepEqual((await rt.Check({ sandbox_id: 'rebridge' })).problems, []);
      // And without an attach: reconcile sets the node up again and puts the pods back on it.
      sh('ip', ['-n', bd.nodeNetnsName, 'link', 'del', 'kni0']);
      assert.match((await rt.Check({ sandbox_id: 'rebridge' })).problems.join(), /not on bridge kni0/);
      const r = await rt.Reconcile({});
      assert.match(r.findings.join('\n'), /node network was not ready \(bridge kni0 is missing\); set up again/);
      assert.deepEqual(r.repaired_sandbox_ids, ['rebridge']);
      assert.equal((await rt.GetNode({})).ready, true);
      assert.deepEqual((await rt.Check({ sandbox_id: 'rebridge' })).problems, []);
      await rt.Detach({ sandbox_id: 'rebridge' });
    });
  });
});
