// What others delete of kni's, repaired as the kernel tells it (plugin/node/kernel-notices.ts,
// plugin/core/notice-repair.ts): the daemon's periodic reconcile runs once an hour here, so a
// repair within the test's wait is the notices' doing. Real kernel: the links deleted with ip in
// the test node's netns; a runtime's netns removed without a DEL. (A peer route deleted:
// test/cluster/node-agent.cluster.ts.)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { Client } from '../plugin/client/clients';
import { NoticeSocket } from '../plugin/netlink/notices';
import { inNetns as inNetnsFd } from '../plugin/netns/netns';
import { inNetns, RUN, sh, trySh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

const NOTICED = "the kernel says a pod's host veth, its route or the bridge was deleted or set down: reconciling now";

describe("kni's links deleted by others, noticed as the kernel tells it (real kernel)", () => {
  let d: TestDaemon;
  let rt: Client;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.84.0.0/24', 'fd00:84::/64'], reconcileSeconds: 3600 });
    rt = d.rt();
  });
  after(() => d?.cleanup());

  it('the notice socket is sent deletions and links going down only (its BPF filter): a veth made, set up, addressed, routed, set down and deleted gives the names of its two ends once as deleted and once as gone down (the one set down, the other taken down by the delete)', () => {
    const ns = `${RUN}-knsock`;
    sh('ip', ['netns', 'add', ns]);
    const fd = fs.openSync(`/run/netns/${ns}`, 'r');
    try {
      const sock = inNetnsFd(fd, () => new NoticeSocket());
      try {
        const ip = (...args: string[]) => sh('ip', ['-n', ns, ...args]);
        ip('link', 'add', 'kn0', 'type', 'veth', 'peer', 'name', 'kn1');
        ip('link', 'set', 'kn0', 'up');
        ip('addr', 'add', '10.9.9.1/24', 'dev', 'kn0');
        ip('route', 'add', '10.8.0.0/16', 'dev', 'kn0', 'proto', '107');
        ip('route', 'del', '10.8.0.0/16', 'dev', 'kn0', 'proto', '107');
        ip('route', 'add', '10.8.1.7/32', 'dev', 'kn0');
        ip('route', 'del', '10.8.1.7/32', 'dev', 'kn0');
        ip('link', 'set', 'kn1', 'up');
        ip('link', 'set', 'kn0', 'down');
        ip('link', 'del', 'kn0');
        const n = sock.drain();
        assert.deepEqual(n.linksDeleted.sort(), ['kn0', 'kn1']);
        // kn1 was up when the pair went: its deletion takes it down too, and says so.
        assert.deepEqual(n.linksDown.sort(), ['kn0', 'kn1']);
        assert.ok(n.routesDeleted.some((r) => r.protocol === 107 && r.family === 2 && r.host === undefined && r.destination === '10.8.0.0/16'), JSON.stringify(n));
        // A route to one address names it: a routed pod's route.
        assert.ok(n.routesDeleted.some((r) => r.family === 2 && r.host === '10.8.1.7'), JSON.stringify(n));
        assert.equal(n.messages, n.linksDeleted.length + n.linksDown.length + n.routesDeleted.length, 'a notice other than a deletion or a link going down reached the socket');
        assert.equal(n.lost, false);
        assert.deepEqual(sock.drain(), { linksDeleted: [], linksDown: [], routesDeleted: [], lost: false, messages: 0 });
      } finally {
        sock.close();
      }
    } finally {
      fs.closeSync(fd);
      trySh('ip', ['netns', 'del', ns]);
    }
  });

  it("kni's own detaches start no reconcile; a pod's host veth deleted is wired again at once, with its addresses", async () => {
    for (let i = 0; i < 4; i++) {
      await rt.Attach({ sandbox_id: `kn-own${i}`, netns_path: d.makePodNetns(`kn-own${i}`) });
      await rt.Detach({ sandbox_id: `kn-own${i}` });
    }
    await d.kniVethsSettled(0);
    // Four polls of the notices, and more.
    await new Promise((r) => setTimeout(r, 1500));
    assert.ok(!d.output.includes(NOTICED), "kni's own veth deletes were taken for someone else's");

    const netns = d.makePodNetns('kn-cut');
    const p = await rt.Attach({ sandbox_id: 'kn-cut', netns_path: netns });
    const [v4, v6] = p.interfaces[0].addresses.map((a: any) => a.address);
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'del', p.interfaces[0].host_interface]);
    await waitFor(async () => (await rt.Check({ sandbox_id: 'kn-cut' })).ok, 30_000, () => `not wired again (reconcile runs hourly here):\n${d.output.slice(-2000)}`);
    assert.ok(d.output.includes(NOTICED));
    const again = await rt.GetPod({ sandbox_id: 'kn-cut' });
    assert.deepEqual(again.interfaces[0].addresses.map((a: any) => a.address), [v4, v6]);
    assert.match(sh('ip', ['-n', d.nodeNetnsName, 'link', 'show', 'dev', again.interfaces[0].host_interface]), /state UP/);
    assert.match(inNetns(netns, 'ip', ['-4', 'addr', 'show', 'dev', 'eth0']).out, new RegExp(v4.replace(/\./g, '\\.')));
    await rt.Detach({ sandbox_id: 'kn-cut' });
  });

  it("a pod's host veth set down and up again at once (its routes gone with it) is wired again at once", async () => {
    const netns = d.makePodNetns('kn-down');
    const p = await rt.Attach({ sandbox_id: 'kn-down', netns_path: netns });
    const host = p.interfaces[0].host_interface;
    const [v4, v6] = p.interfaces[0].addresses.map((a: any) => a.address);
    const routeTo = (ip: string) => sh('ip', ['-n', d.nodeNetnsName, 'route', 'get', ip]);
    assert.match(routeTo(v4), new RegExp(`dev ${host}`));
    const noticedBefore = d.output.split(NOTICED).length;
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', host, 'down']);
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', host, 'up']);
    await waitFor(async () => (await rt.Check({ sandbox_id: 'kn-down' })).ok, 30_000, () => `not wired again (reconcile runs hourly here):\n${d.output.slice(-2000)}`);
    await waitFor(() => d.output.split(NOTICED).length > noticedBefore, 10_000, () => 'repaired, but not on the notice');
    const again = await rt.GetPod({ sandbox_id: 'kn-down' });
    assert.deepEqual(again.interfaces[0].addresses.map((a: any) => a.address), [v4, v6]);
    assert.match(routeTo(v4), new RegExp(`dev ${again.interfaces[0].host_interface}`));
    assert.match(routeTo(v6), new RegExp(`dev ${again.interfaces[0].host_interface}`));
    await rt.Detach({ sandbox_id: 'kn-down' });
  });

  it("a routed pod's route deleted on the node (both families) is put back at once", async () => {
    const netns = d.makePodNetns('kn-route');
    const p = await rt.Attach({ sandbox_id: 'kn-route', netns_path: netns });
    const host = p.interfaces[0].host_interface;
    const [v4, v6] = p.interfaces[0].addresses.map((a: any) => a.address);
    const routes = () => sh('ip', ['-n', d.nodeNetnsName, 'route', 'show', 'dev', host]) + sh('ip', ['-n', d.nodeNetnsName, '-6', 'route', 'show', 'dev', host]);
    for (const [ip, len] of [[v4, 32], [v6, 128]] as const) {
      const noticedBefore = d.output.split(NOTICED).length;
      sh('ip', ['-n', d.nodeNetnsName, 'route', 'del', `${ip}/${len}`, 'dev', host]);
      await waitFor(() => routes().includes(ip), 30_000, () => `${ip} not routed again (reconcile runs hourly here):\n${routes()}\n${d.output.slice(-2000)}`);
      await waitFor(() => d.output.split(NOTICED).length > noticedBefore, 10_000, () => 'routed again, but not on the notice');
      assert.ok((await rt.Check({ sandbox_id: 'kn-route' })).ok);
    }
    await rt.Detach({ sandbox_id: 'kn-route' });
  });

  it('the bridge set down, then deleted: made whole again at once, gateways and all, the node ready', async () => {
    const bridge = () => sh('ip', ['-n', d.nodeNetnsName, 'addr', 'show', 'dev', 'kni0']);
    for (const how of [['set', 'kni0', 'down'], ['del', 'kni0']]) {
      const noticedBefore = d.output.split(NOTICED).length;
      sh('ip', ['-n', d.nodeNetnsName, 'link', ...how]);
      await waitFor(() => trySh('ip', ['-n', d.nodeNetnsName, 'link', 'show', 'kni0']).out.match(/[<,]UP[,>]/) !== null && /inet 10\.84\.0\.1\/24/.test(bridge()), 30_000, () => `kni0 not set up again after ${how.join(' ')} (reconcile runs hourly here):\n${d.output.slice(-2000)}`);
      // The checks above block this process's event loop: its copy of the daemon's log may lag.
      await waitFor(() => d.output.split(NOTICED).length > noticedBefore, 10_000, () => `kni0 back after ${how.join(' ')}, but not on the notice`);
      assert.match(bridge(), /inet6 fd00:84::1\/64/);
      await waitFor(async () => (await rt.GetNode({})).ready, 10_000, () => 'the node is not ready again');
    }
  });

  it('a pod whose netns the runtime removed without a DEL is released at once, its addresses free', async () => {
    const netns = d.makePodNetns('kn-gone');
    const p = await rt.Attach({ sandbox_id: 'kn-gone', netns_path: netns });
    const v4 = p.interfaces[0].addresses[0].address;
    // As a runtime that crashed and cleaned up: the netns unpinned, the kernel tears it down with the veth.
    sh('ip', ['netns', 'del', netns.split('/').pop()!]);
    await waitFor(async () => !(await rt.ListPods({})).pods.some((x: any) => x.sandbox_id === 'kn-gone'), 30_000, () => `not released (reconcile runs hourly here):\n${d.output.slice(-2000)}`);
    const ranges = (await rt.GetIPAMStatus({})).ranges as any[];
    assert.equal(Number(ranges.find((r) => r.cidr === '10.84.0.0/24').used), 0, `${v4} still held: ${JSON.stringify(ranges)}`);
  });
});
