// Pods wired by a real kni-runtime on a real kernel: connectivity, idempotency, clean detach.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { Client } from '../plugin/client/clients';
import { hostVethName } from '../plugin/core/network-runtime';
import { rejectsWith } from './helpers/expect';
import { masqueradeTable } from './helpers/masquerade-table';
import { inNetns, ping } from './helpers/sh';
import { stateRecords } from './helpers/state-records';
import { addressesOf, newPod as newTestPod, TestPod } from './helpers/pods';
import { TestDaemon } from './helpers/test-daemon';

describe('pod network (real kernel)', () => {
  let d: TestDaemon;
  let rt: Client;
  let kni: Client;

  before(async () => {
    // The bridge's own behaviour (routed pods: pod-network-routed.test.ts).
    d = await TestDaemon.start({ podLink: 'bridge' });
    rt = d.rt();
    kni = d.kni();
  });
  after(() => d?.cleanup());

  const newPod = (id: string): Promise<TestPod> => newTestPod(kni, rt, id);

  it('sets up the node: bridge with gateways, forwarding, masquerade for what leaves the pod ranges', () => {
    const addrs = inNetns(d.nodeNetns, 'ip', ['-o', 'addr', 'show', 'dev', 'kni0']).out;
    assert.match(addrs, /inet 10\.244\.0\.1\/24/);
    assert.match(inNetns(d.nodeNetns, 'ip', ['-d', 'link', 'show', 'kni0']).out, /mcast_snooping 0/, 'multicast snooping is off by default');
    assert.match(addrs, /inet6 fd00:10:244::1\/64/);
    assert.equal(inNetns(d.nodeNetns, 'cat', ['/proc/sys/net/ipv4/ip_forward']).out.trim(), '1');
    const table = masqueradeTable(d.nodeNetns)!;
    assert.deepEqual([table.sets.pods4, table.sets.pods6], [['10.244.0.0/24'], ['fd00:10:244::/64']]);
    assert.ok(table.sets.keep4.includes('10.244.0.0/24') && table.sets.keep6.includes('fd00:10:244::/64'), JSON.stringify(table.sets));
    assert.deepEqual(table.rules, [
      'ip saddr @pods4 ip daddr != @keep4 masquerade comment "kni: masquerade traffic leaving the cluster\'s pods"',
      'ip6 saddr @pods6 ip6 daddr != @keep6 masquerade comment "kni: masquerade traffic leaving the cluster\'s pods"',
    ]);
    assert.doesNotMatch(inNetns(d.nodeNetns, 'iptables', ['-t', 'nat', '-S']).out, /KNI-MASQ/);
  });

  it('gives two pods dual-stack addresses; they ping each other and the gateway', async () => {
    const a = await newPod('ping-a');
    const b = await newPod('ping-b');
    try {
      const [a4, a6] = addressesOf(a.net);
      const [b4, b6] = addressesOf(b.net);
      assert.match(a4, /^10\.244\.0\.\d+$/);
      assert.match(a6, /^fd00:10:244::/);
      assert.notEqual(a4, b4);
      assert.ok(ping(a.netns, b4), `${a4} cannot ping ${b4}`);
      assert.ok(ping(a.netns, b6), `${a6} cannot ping ${b6}`);
      assert.ok(ping(b.netns, a4));
      assert.ok(ping(b.netns, '10.244.0.1'), 'pod cannot reach the IPv4 gateway');
      assert.ok(ping(b.netns, 'fd00:10:244::1'), 'pod cannot reach the IPv6 gateway');
      assert.ok(ping(a.netns, a4), 'a pod cannot reach itself');

      // What the kernel has matches what the API says.
      const itf = a.net.interfaces[0];
      const link = inNetns(a.netns, 'ip', ['-o', 'link', 'show', 'eth0']).out;
      assert.match(link, /mtu 1500/);
      assert.match(link, new RegExp(itf.mac));
      assert.match(inNetns(a.netns, 'ip', ['-o', 'link', 'show', 'lo']).out, /UP/);
      assert.match(inNetns(a.netns, 'ip', ['route']).out, /default via 10\.244\.0\.1 dev eth0/);
      assert.match(inNetns(a.netns, 'ip', ['-6', 'route']).out, /default via fd00:10:244::1 dev eth0/);
      const port = inNetns(d.nodeNetns, 'ip', ['-d', 'link', 'show', itf.host_interface]).out;
      assert.match(port, /master kni0/);
      assert.match(port, /hairpin on/);
      // One queue each way on both ends (link.ts vethAdd: no expedited RCU wait at creation).
      assert.match(port, /numtxqueues 1 numrxqueues 1 /);
      assert.match(inNetns(a.netns, 'ip', ['-d', 'link', 'show', 'eth0']).out, /numtxqueues 1 numrxqueues 1 /);
      // Both host ends share one MAC (pod-wiring.ts), and the pods above reached each other.
      assert.match(port, /link\/ether ee:ee:ee:ee:ee:ee/);
      assert.match(inNetns(d.nodeNetns, 'ip', ['link', 'show', b.net.interfaces[0].host_interface]).out, /link\/ether ee:ee:ee:ee:ee:ee/);
      assert.equal((await rt.Check({ sandbox_id: 'ping-a' })).ok, true);
    } finally {
      await rt.Detach({ sandbox_id: 'ping-a' });
      await rt.Detach({ sandbox_id: 'ping-b' });
    }
  });

  it('detach leaves no veth, netns, address or record behind', async () => {
    const a = await newPod('gone-a');
    const veth = a.net.interfaces[0].host_interface;
    assert.ok(d.nodeLinks().includes(veth));
    const used = Number((await rt.GetIPAMStatus()).ranges[0].used);
    assert.deepEqual(await rt.Detach({ sandbox_id: 'gone-a' }), { released: true });
    // kni unpins its netns; the kernel takes the veth down with it moments later.
    assert.ok(await d.linkGone(veth), 'host veth still there after 20 s');
    assert.ok(!fs.existsSync(a.netns), 'netns pin still there');
    assert.equal(Number((await rt.GetIPAMStatus()).ranges[0].used), used - 1);
    assert.ok(!stateRecords(d.stateDir, 'sandboxes').has('gone-a'), 'record still there');
    assert.ok(!(await rt.ListPods()).pods.some((p: any) => p.sandbox_id === 'gone-a'));
  });

  it('detach of a runtime-created netns deletes the veth and keeps the netns', async () => {
    const netns = d.makePodNetns('own-ns');
    await rt.Attach({ sandbox_id: 'own-ns', netns_path: netns });
    await rt.Detach({ sandbox_id: 'own-ns' });
    assert.ok(fs.existsSync(netns));
    // A plain Detach (the netns stays, as a runtime that reconnects networks keeps it): no eth0
    // when it answers (the pod end waits down and renamed until the reaper deletes the veth).
    assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/);
    assert.ok(!d.nodeLinks().includes(hostVethName('own-ns', 'eth0')));
  });

  it('attach twice answers the same network; detach twice and of unknown ids succeeds', async () => {
    const a = await newPod('twice');
    const again = await rt.Attach({ sandbox_id: 'twice', netns_path: a.netns });
    assert.deepEqual(again, a.net);
    assert.equal(d.nodeLinks().filter((l) => l === a.net.interfaces[0].host_interface).length, 1);
    assert.deepEqual(await rt.Detach({ sandbox_id: 'twice' }), { released: true });
    assert.deepEqual(await rt.Detach({ sandbox_id: 'twice' }), { released: false });
    assert.deepEqual(await rt.Detach({ sandbox_id: 'never-seen' }), { released: false });
  });

  it('answers the whole pod network in GetPod: interfaces, prefixes, routes, netns', async () => {
    const a = await newPod('query');
    try {
      const p = await rt.GetPod({ sandbox_id: 'query' });
      assert.equal(p.netns_path, a.netns);
      assert.deepEqual(p.pod, { name: 'query', namespace: 'default', uid: 'uid-1' });
      const [v4, v6] = p.interfaces[0].addresses;
      assert.deepEqual([v4.family, v4.prefix_length, v4.gateway], ['IPV4', 24, '10.244.0.1']);
      assert.deepEqual([v6.family, v6.prefix_length, v6.gateway], ['IPV6', 64, 'fd00:10:244::1']);
      assert.ok(p.routes.some((r: any) => r.destination === '0.0.0.0/0' && r.gateway === '10.244.0.1'));
      assert.ok(p.routes.some((r: any) => r.destination === '::/0' && r.gateway === 'fd00:10:244::1'));
    } finally {
      await rt.Detach({ sandbox_id: 'query' });
    }
  });

  it('Check reports a veth deleted behind its back', async () => {
    const a = await newPod('drift');
    try {
      inNetns(d.nodeNetns, 'ip', ['link', 'del', a.net.interfaces[0].host_interface]);
      const r = await rt.Check({ sandbox_id: 'drift' });
      assert.equal(r.ok, false);
      assert.ok(r.problems.some((p: string) => /host veth .* is missing/.test(p)), r.problems.join('; '));
    } finally {
      await rt.Detach({ sandbox_id: 'drift' });
    }
  });

  it('sets multicast snooping as configured on a bridge it finds at start', async () => {
    inNetns(d.nodeNetns, 'ip', ['link', 'set', 'kni0', 'type', 'bridge', 'mcast_snooping', '1']);
    await d.restart();
    assert.match(inNetns(d.nodeNetns, 'ip', ['-d', 'link', 'show', 'kni0']).out, /mcast_snooping 0/);
    const cfg = JSON.parse(fs.readFileSync(d.configFile, 'utf8'));
    fs.writeFileSync(d.configFile, JSON.stringify({ ...cfg, bridgeMulticastSnooping: true }));
    try {
      await d.restart();
      assert.match(inNetns(d.nodeNetns, 'ip', ['-d', 'link', 'show', 'kni0']).out, /mcast_snooping 1/);
    } finally {
      fs.writeFileSync(d.configFile, JSON.stringify(cfg));
      await d.restart();
    }
    rt = d.rt();
    kni = d.kni();
  });

  it('a bridge with no free port (1023 taken) refuses the pod with RESOURCE_EXHAUSTED, keeps nothing of it, and takes it once a port frees', async () => {
    const inNode = (lines: string[]) => {
      const r = spawnSync('ip', ['-n', d.nodeNetnsName, '-batch', '-'], { input: lines.join('\n'), encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
    };
    const ports = inNetns(d.nodeNetns, 'ip', ['-o', 'link', 'show', 'master', 'kni0']).out.trim().split('\n').filter(Boolean).length;
    const fillers = Array.from({ length: 1023 - ports }, (_, i) => `kf${i}`);
    // The fillers' other ends wait in a netns of their own; one group delete takes them all.
    const peers = d.makePodNetns('fillers').split('/').pop()!;
    const netns = d.makePodNetns('full');
    try {
      inNode(fillers.map((f, i) => `link add ${f} group 4242 type veth peer name p${i} netns ${peers}\nlink set ${f} master kni0`));
      await rejectsWith(rt.Attach({ sandbox_id: 'full', netns_path: netns }), grpc.status.RESOURCE_EXHAUSTED, /bridge has no free port.*1023.*EXFULL/);
      assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/);
      assert.ok(!stateRecords(d.stateDir, 'sandboxes').has('full'), 'record kept');
      inNode([`link del ${fillers[0]}`]);
      await rt.Attach({ sandbox_id: 'full', netns_path: netns });
      await rt.Detach({ sandbox_id: 'full' });
    } finally {
      inNode(['link del group 4242']);
    }
  });

  it('serves on a 0600 socket', () => {
    assert.equal(fs.statSync(d.socket).mode & 0o777, 0o600);
  });
});
