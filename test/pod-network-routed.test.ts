// Routed pods (podLink "routed") on a real kernel: no bridge port, a /32 and /128 per pod with a
// host route and neighbour entries written ahead; reachability, Check, restart, and a node that
// has pods on the bridge already ("auto", and a switch).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { Client } from '../plugin/client/clients';
import { inNetns, ping, sh } from './helpers/sh';
import { addressesOf, newPod as newTestPod, TestPod } from './helpers/pods';
import { TestDaemon } from './helpers/test-daemon';

describe('routed pods (real kernel)', () => {
  let d: TestDaemon;
  let rt: Client;
  let kni: Client;

  before(async () => {
    d = await TestDaemon.start({ podLink: 'routed' });
    rt = d.rt();
    kni = d.kni();
  });
  after(() => d?.cleanup());

  const newPod = (id: string): Promise<TestPod> => newTestPod(kni, rt, id);

  it('wires a pod without a bridge port: /32 and /128, a link route to the gateway, routes and neighbours written ahead', async () => {
    const a = await newPod('rt-a');
    const b = await newPod('rt-b');
    try {
      const [a4, a6] = addressesOf(a.net);
      const [b4, b6] = addressesOf(b.net);
      assert.ok(ping(a.netns, b4), `${a4} cannot ping ${b4}`);
      assert.ok(ping(a.netns, b6), `${a6} cannot ping ${b6}`);
      assert.ok(ping(b.netns, '10.244.0.1'), 'pod cannot reach the IPv4 gateway');
      assert.ok(ping(b.netns, 'fd00:10:244::1'), 'pod cannot reach the IPv6 gateway');
      assert.ok(ping(a.netns, a4), 'a pod cannot reach itself');
      assert.ok(ping(d.nodeNetns, a4), 'the node cannot reach a pod (kubelet probes)');
      assert.ok(ping(d.nodeNetns, a6), 'the node cannot reach a pod over IPv6');

      const itf = a.net.interfaces[0];
      assert.deepEqual(itf.addresses.map((x: any) => x.prefix_length), [32, 128]);
      const addrs = inNetns(a.netns, 'ip', ['-o', 'addr', 'show', 'dev', 'eth0']).out;
      assert.match(addrs, new RegExp(`inet ${a4}/32 `));
      assert.match(addrs, new RegExp(`inet6 ${a6}/128 `));
      const routes = inNetns(a.netns, 'ip', ['route']).out;
      assert.match(routes, /default via 10\.244\.0\.1 dev eth0/);
      assert.match(routes, /10\.244\.0\.1 dev eth0 .*scope link/);
      const routes6 = inNetns(a.netns, 'ip', ['-6', 'route']).out;
      assert.match(routes6, /default via fd00:10:244::1 dev eth0/);
      assert.match(routes6, /fd00:10:244::1 dev eth0/);
      const podNeigh = inNetns(a.netns, 'ip', ['neigh', 'show', 'dev', 'eth0']).out;
      assert.match(podNeigh, /10\.244\.0\.1 lladdr ee:ee:ee:ee:ee:ee PERMANENT/);
      assert.match(podNeigh, /fd00:10:244::1 lladdr ee:ee:ee:ee:ee:ee PERMANENT/);

      const host = itf.host_interface;
      const port = inNetns(d.nodeNetns, 'ip', ['-d', 'link', 'show', host]).out;
      assert.doesNotMatch(port, /master/);
      assert.match(port, /link\/ether ee:ee:ee:ee:ee:ee/);
      assert.match(inNetns(d.nodeNetns, 'ip', ['route', 'show', `${a4}/32`]).out, new RegExp(`dev ${host} .*scope link`));
      assert.match(inNetns(d.nodeNetns, 'ip', ['-6', 'route', 'show', `${a6}/128`]).out, new RegExp(`dev ${host}`));
      const hostNeigh = inNetns(d.nodeNetns, 'ip', ['neigh', 'show', 'dev', host]).out;
      assert.match(hostNeigh, new RegExp(`${a4} lladdr ${itf.mac} PERMANENT`));
      assert.match(hostNeigh, new RegExp(`${a6} lladdr ${itf.mac} PERMANENT`));
      assert.equal(inNetns(d.nodeNetns, 'ip', ['-o', 'link', 'show', 'master', 'kni0']).out.trim(), '', 'no pod joined the bridge');

      const p = await rt.GetPod({ sandbox_id: 'rt-a' });
      assert.ok(p.routes.some((r: any) => r.destination === '10.244.0.1/32' && r.gateway === ''));
      assert.ok(p.routes.some((r: any) => r.destination === '0.0.0.0/0' && r.gateway === '10.244.0.1'));
      assert.equal((await rt.Check({ sandbox_id: 'rt-a' })).ok, true);
      assert.equal((await rt.GetNode({})).networks[0].pod_link, 'routed');
    } finally {
      await rt.Detach({ sandbox_id: 'rt-a' });
      await rt.Detach({ sandbox_id: 'rt-b' });
    }
    assert.equal(inNetns(d.nodeNetns, 'ip', ['route', 'show', '10.244.0.0/24', 'root', '10.244.0.0/24']).out.match(/\/32|^10\.244\.0\.\d+ /gm), null, 'a host route outlived its pod');
  });

  it('Check reports a routed pod whose host route was deleted behind its back; reconcile wires it again', async () => {
    const a = await newPod('rt-drift');
    try {
      const [a4] = addressesOf(a.net);
      inNetns(d.nodeNetns, 'ip', ['route', 'del', `${a4}/32`]);
      const r = await rt.Check({ sandbox_id: 'rt-drift' });
      assert.equal(r.ok, false);
      assert.ok(r.problems.some((x: string) => x.includes(`no route to ${a4} through host veth`)), r.problems.join('; '));
      const rec = await rt.Reconcile({});
      assert.ok(rec.findings.some((x: string) => x.includes('rt-drift')), rec.findings.join('; '));
      assert.equal((await rt.Check({ sandbox_id: 'rt-drift' })).ok, true, 'reconcile did not wire the pod again');
      assert.ok(ping(d.nodeNetns, a4), 'the node cannot reach the pod after reconcile');
    } finally {
      await rt.Detach({ sandbox_id: 'rt-drift' });
    }
  });

  it('rebuilds a lost routed record from the kernel, as routed', async () => {
    const a = await newPod('rt-lost');
    try {
      await d.stop('SIGKILL');
      for (const f of fs.readdirSync(d.stateDir)) fs.rmSync(`${d.stateDir}/${f}`, { recursive: true, force: true });
      await d.restart();
      rt = d.rt();
      kni = d.kni();
      const p = await rt.GetPod({ sandbox_id: 'rt-lost' });
      assert.deepEqual(p.interfaces[0].addresses.map((x: any) => x.prefix_length), [32, 128]);
      assert.deepEqual(addressesOf(p), addressesOf(a.net));
      assert.equal((await rt.Check({ sandbox_id: 'rt-lost' })).ok, true);
    } finally {
      await rt.Detach({ sandbox_id: 'rt-lost' });
    }
  });

  it('a node with pods on the bridge: "auto" keeps the bridge; "routed" is obeyed with a warning, and the bridged pods keep working', async () => {
    const setPodLink = async (podLink?: string) => {
      await d.stop();
      const cfg = JSON.parse(fs.readFileSync(d.configFile, 'utf8'));
      fs.writeFileSync(d.configFile, JSON.stringify({ ...cfg, podLink }));
      const before = d.output.length;
      await d.restart();
      rt = d.rt();
      kni = d.kni();
      return () => d.output.slice(before);
    };
    const master = (p: TestPod) => /master kni0/.test(inNetns(d.nodeNetns, 'ip', ['-d', 'link', 'show', p.net.interfaces[0].host_interface]).out);
    await setPodLink('bridge');
    const bridged = await newPod('rt-old');
    let kept: TestPod | undefined;
    let routed: TestPod | undefined;
    try {
      // Bridged traffic kept from iptables in this node netns: kni says what that breaks.
      sh('ip', ['netns', 'exec', d.nodeNetnsName, 'sysctl', '-qw', 'net.bridge.bridge-nf-call-iptables=0']);
      const autoLog = await setPodLink(undefined);
      assert.match(autoLog(), /new pods are wired on the bridge.*1 pod interface\(s\) on the bridge already/);
      assert.match(autoLog(), /pods are wired on the bridge but net\.bridge\.bridge-nf-call-iptables is 0: a Service between two pods of this node gets no answer/);
      assert.doesNotMatch(autoLog(), /bridge-nf-call-ip6tables is/);
      assert.deepEqual((await rt.GetNode({})).warnings.map((w: string) => w.split(':')[0]), ['pods are wired on the bridge but net.bridge.bridge-nf-call-iptables is 0']);
      assert.equal((await rt.GetNode({})).networks[0].pod_link, 'bridge', 'GetNode does not show "auto" resolved');
      kept = await newPod('rt-kept');
      assert.ok(master(kept), '"auto" put a new pod off the bridge of a node with bridged pods');
      const routedLog = await setPodLink('routed');
      assert.match(routedLog(), /2 pod interface\(s\) were wired on the bridge before podLink became \\"routed\\"/);
      assert.doesNotMatch(routedLog(), /bridge-nf-call/, 'routed pods need no br_netfilter');
      assert.deepEqual((await rt.GetNode({})).warnings, [routedLog().split('\n').map((l) => (l.startsWith('{') ? JSON.parse(l) : {})).find((l) => /were wired on the bridge before podLink/.test(l.msg ?? ''))?.msg], 'GetNode shows the mixed-pods warning, and br_netfilter no more');
      routed = await newPod('rt-new');
      assert.ok(master(bridged) && !master(routed));
      for (const p of [bridged, routed]) {
        const [v4, v6] = addressesOf(p.net);
        assert.ok(ping(d.nodeNetns, v4) && ping(d.nodeNetns, v6), `the node cannot reach ${v4}`);
        assert.ok(ping(p.netns, '10.244.0.1') && ping(p.netns, 'fd00:10:244::1'), `${v4} cannot reach its gateways`);
      }
      assert.equal((await rt.Check({ sandbox_id: 'rt-old' })).ok, true);
      assert.equal((await rt.Check({ sandbox_id: 'rt-new' })).ok, true);
    } finally {
      await rt.Detach({ sandbox_id: 'rt-old' });
      if (kept) await rt.Detach({ sandbox_id: 'rt-kept' });
      if (routed) await rt.Detach({ sandbox_id: 'rt-new' });
    }
  });
});
