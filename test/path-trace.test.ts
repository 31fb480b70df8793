// knictl trace / Trace on a real kernel: the path a pod's packet takes, hop by hop, to a pod on
// the node, the pod itself, the node, an address of the pod range no pod has, and outside;
// what stops it (a host veth gone, no route on the node); bad input refused.
// Another node's pods: test/cluster/node-agent.cluster.ts.
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { rejectsWith } from './helpers/expect';
import { knictl } from './helpers/knictl';
import { addressesOf, newPod, TestPod } from './helpers/pods';
import { inNetns, RUN, sh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

describe('knictl trace: the path a pod\'s packet takes (real kernel)', () => {
  let d: TestDaemon;
  let a: TestPod;
  let b: TestPod;
  const trace = (sandbox: string, dst: string) => {
    const r = knictl('--socket', d.socket, 'trace', sandbox, dst, '-o', 'json');
    assert.ok(r.status === 0 || r.status === 2, r.stderr);
    return { ...JSON.parse(r.stdout), status: r.status };
  };

  before(async () => {
    // A host veth deleted below stays deleted while traced: not repaired on the kernel's notice.
    d = await TestDaemon.start({ repairOnNotice: false });
    a = await newPod(d.kni(), d.rt(), 'tr-a');
    b = await newPod(d.kni(), d.rt(), 'tr-b');
    // The node's uplink: an IPv4 default route, no IPv6 one. Gone with the node netns.
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'add', `${RUN}up`, 'type', 'veth', 'peer', 'name', `${RUN}uq`]);
    sh('ip', ['-n', d.nodeNetnsName, 'addr', 'add', '198.51.100.1/24', 'dev', `${RUN}up`]);
    for (const l of [`${RUN}up`, `${RUN}uq`]) sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', l, 'up']);
    sh('ip', ['-n', d.nodeNetnsName, 'route', 'add', 'default', 'via', '198.51.100.254', 'dev', `${RUN}up`]);
  });
  after(() => d?.cleanup());

  it('to a pod on this node, over IPv4 and IPv6: the pod\'s route, then that pod and its host veth', () => {
    const [a4, a6] = addressesOf(a.net);
    const [b4, b6] = addressesOf(b.net);
    const t = trace('tr-a', b4);
    assert.equal(t.status, 0);
    assert.deepEqual([t.kind, t.ok, t.destination], ['pod', true, b4]);
    assert.equal(t.hops[0].at, 'pod');
    assert.equal(t.hops[0].what, `route to ${b4} via 10.244.0.1 dev eth0 src ${a4}`);
    assert.match(t.hops[1].what, new RegExp(`^pod default/tr-b on this node \\(sandbox tr-b, eth0\\), through host veth \\S+$`));
    assert.deepEqual(t.hops.map((h: any) => h.problem), ['', '']);
    const t6 = trace('tr-a', b6.replace('::', ':0::'));
    assert.deepEqual([t6.kind, t6.ok, t6.destination], ['pod', true, b6]);
    assert.match(t6.hops[0].what, new RegExp(`dev eth0 src ${a6}$`));
    const table = knictl('--socket', d.socket, 'trace', 'default/tr-a', b4);
    assert.equal(table.stdout, `pod: ${t.hops[0].what}\nnode: ${t.hops[1].what}\nok\n`);
  });

  it('to the pod itself, and to the node (its gateway, its uplink)', () => {
    const self = trace('tr-a', addressesOf(a.net)[0]);
    assert.deepEqual([self.kind, self.ok, self.hops.length], ['self', true, 1]);
    assert.match(self.hops[0].what, /is the pod's own address/);
    for (const [ip, dev] of [['10.244.0.1', 'kni0'], ['198.51.100.1', `${RUN}up`]]) {
      const t = trace('tr-a', ip);
      assert.deepEqual([t.kind, t.ok], ['node', true], JSON.stringify(t));
      assert.equal(t.hops[1].what, `${ip} is this node's own address (${dev})`);
    }
  });

  it('to an address of the pod range no pod has: the reason, exit 2', () => {
    const r = knictl('--socket', d.socket, 'trace', 'tr-a', '10.244.0.200');
    assert.equal(r.status, 2);
    assert.match(r.stdout, /^node: 10\.244\.0\.200 is in this node's pod range\n  PROBLEM: no pod on this node has 10\.244\.0\.200 \(a pod gone or not yet started: knictl pods lists them\)\n$/m);
    assert.equal(trace('tr-a', '10.244.0.200').kind, 'pod-range');
  });

  it('outside the pod networks: the node\'s route and whether it is masqueraded; no route on the node is the problem', () => {
    const t = trace('tr-a', '192.0.2.7');
    assert.deepEqual([t.kind, t.ok], ['outside', true]);
    assert.match(t.hops[1].what, new RegExp(`^192\\.0\\.2\\.7 is outside the pod networks: the node routes it via 198\\.51\\.100\\.254 dev ${RUN}up src 198\\.51\\.100\\.1; masqueraded to the node's address \\(nftables inet kni-masquerade\\)\\. If it is a Service's ClusterIP, the node's service proxy \\(kube-proxy\\) rewrites it`));
    const t6 = trace('tr-a', '2001:db8::7');
    assert.deepEqual([t6.kind, t6.ok, t6.status], ['outside', false, 2]);
    assert.equal(t6.hops[0].problem, '', 'the pod has its IPv6 default route');
    assert.equal(t6.hops[1].problem, 'the node has no route to 2001:db8::7');
  });

  it('to a pod whose host veth is gone: the mismatch with kni\'s record, and how to repair it', async () => {
    const hostVeth = b.net.interfaces[0].host_interface;
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'del', hostVeth]);
    try {
      const t = trace('tr-a', addressesOf(b.net)[0]);
      assert.deepEqual([t.kind, t.ok, t.status], ['pod', false, 2]);
      assert.match(t.hops[1].what, /through host veth \S+ \(missing\)$/);
      assert.match(t.hops[1].problem, new RegExp(`^its network does not match kni's record: .*host veth ${hostVeth} is missing.* \\(knictl reconcile repairs it\\)$`));
    } finally {
      await d.rt().Reconcile({});
    }
    assert.equal(trace('tr-a', addressesOf(b.net)[0]).ok, true, 'reconcile did not repair the pod');
  });

  it('from a pod whose own interface no longer matches kni\'s record (an address removed in the pod): the pod hop says so, the rest is traced still', async () => {
    const [a4] = addressesOf(a.net);
    const [b4, b6] = addressesOf(b.net);
    assert.ok(inNetns(a.netns, 'ip', ['-6', 'addr', 'del', `${addressesOf(a.net)[1]}/128`, 'dev', 'eth0']).ok);
    try {
      const t = trace('tr-a', b4);
      assert.deepEqual([t.kind, t.ok, t.status], ['pod', false, 2]);
      assert.equal(t.hops[0].what, `route to ${b4} via 10.244.0.1 dev eth0 src ${a4}`);
      assert.match(t.hops[0].problem, /^the pod's eth0 does not match kni's record: .*fd00:10:244::.* \(knictl reconcile repairs it\)$/);
      assert.equal(t.hops[1].problem, '', 'the pod on the other end is fine');
      assert.ok(trace('tr-a', b6).hops.length >= 1);
    } finally {
      await d.rt().Reconcile({});
    }
    assert.equal(trace('tr-a', b4).ok, true, 'reconcile did not repair the pod');
  });

  it('from the node itself (--from-node, as the kubelet\'s probes go): to a pod here, its host veth gone is the problem; outside, nothing is masqueraded', async () => {
    const [b4, b6] = addressesOf(b.net);
    const fromNode = (dst: string) => {
      const r = knictl('--socket', d.socket, 'trace', '--from-node', dst, '-o', 'json');
      assert.ok(r.status === 0 || r.status === 2, r.stderr);
      return { ...JSON.parse(r.stdout), status: r.status };
    };
    for (const ip of [b4, b6]) {
      const t = fromNode(ip);
      assert.deepEqual([t.kind, t.ok, t.status, t.hops.length], ['pod', true, 0, 1], JSON.stringify(t));
      assert.match(t.hops[0].what, /^pod default\/tr-b on this node \(sandbox tr-b, eth0\), through host veth \S+$/);
    }
    const out = fromNode('192.0.2.7');
    assert.deepEqual([out.kind, out.ok], ['outside', true]);
    assert.match(out.hops[0].what, new RegExp(`^192\\.0\\.2\\.7 is outside the pod networks: the node routes it via 198\\.51\\.100\\.254 dev ${RUN}up src 198\\.51\\.100\\.1\\. If it is a Service's ClusterIP`));
    assert.deepEqual([fromNode('10.244.0.1').kind, fromNode('10.244.0.200').kind], ['node', 'pod-range']);
    const hostVeth = b.net.interfaces[0].host_interface;
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'del', hostVeth]);
    try {
      const t = fromNode(b4);
      assert.deepEqual([t.kind, t.ok, t.status], ['pod', false, 2]);
      assert.match(t.hops[0].problem, new RegExp(`host veth ${hostVeth} is missing`));
    } finally {
      await d.rt().Reconcile({});
    }
    assert.equal(fromNode(b4).ok, true, 'reconcile did not repair the pod');
    const table = knictl('--socket', d.socket, 'trace', '--from-node', b4);
    assert.equal(table.stdout, `node: ${fromNode(b4).hops[0].what}\nok\n`);
    // A sandbox and --from-node, or neither: refused before any call, and by the API.
    assert.match(knictl('--socket', d.socket, 'trace', '--from-node', 'tr-a', b4).stderr, /^knictl: trace --from-node takes a destination only, no sandbox$/m);
    assert.match(knictl('--socket', d.socket, 'trace', 'tr-a').stderr, /^knictl: trace needs a sandbox and a destination/m);
    await rejectsWith(d.rt().Trace({ sandbox_id: 'tr-a', destination: b4, from_node: true }), grpc.status.INVALID_ARGUMENT, /from_node traces from the node itself: leave sandbox_id empty/);
    await rejectsWith(d.rt().Trace({ from_node: true, destination: 'x' }), grpc.status.INVALID_ARGUMENT, /destination: not an IP address/);
    await rejectsWith(d.rt().Trace({ destination: b4 }), grpc.status.INVALID_ARGUMENT, /sandbox/);
  });

  it('bad input: a destination that is no address, a sandbox not attached', async () => {
    await rejectsWith(d.rt().Trace({ sandbox_id: 'tr-a', destination: '10.0.0' }), grpc.status.INVALID_ARGUMENT, /destination: not an IP address: "10\.0\.0"/);
    await rejectsWith(d.rt().Trace({ sandbox_id: 'tr-a', destination: '' }), grpc.status.INVALID_ARGUMENT, /destination is required/);
    await rejectsWith(d.rt().Trace({ sandbox_id: 'nope', destination: '10.244.0.1' }), grpc.status.NOT_FOUND, /sandbox nope is not attached/);
    // Addresses no pod sends to on purpose: an answer, or a precise refusal, never an internal error.
    for (const odd of ['0.0.0.0', '255.255.255.255', '224.0.0.1', '127.0.0.1', '::', '::1', 'ff02::1', 'fe80::1']) {
      try {
        const t = await d.rt().Trace({ sandbox_id: 'tr-a', destination: odd });
        assert.ok(t.hops.length > 0, odd);
      } catch (e) {
        const err = e as grpc.ServiceError;
        assert.ok([grpc.status.INVALID_ARGUMENT, grpc.status.FAILED_PRECONDITION].includes(err.code), `${odd}: ${grpc.status[err.code]} ${err.details}`);
      }
    }
    // A destination by name needs the API: not here, and refused with the reason; a bad name first.
    await rejectsWith(d.rt().Trace({ sandbox_id: 'tr-a', destination: 'service/default/web' }), grpc.status.FAILED_PRECONDITION, /^destination service\/default\/web: a destination by name needs kni's Kubernetes connection/);
    await rejectsWith(d.rt().Trace({ sandbox_id: 'tr-a', destination: 'pod/Not_A_Namespace/x' }), grpc.status.INVALID_ARGUMENT, /namespace "Not_A_Namespace" is not a DNS label/);
    await rejectsWith(d.rt().Trace({ from_node: true, destination: 'svc/default/' }), grpc.status.INVALID_ARGUMENT, /name "" is not a DNS subdomain/);
    const r = knictl('--socket', d.socket, 'trace', 'tr-a', 'fd00::1::2');
    assert.equal(r.status, 1);
    assert.match(r.stderr, /^knictl: INVALID_ARGUMENT: destination: not an IP address: "fd00::1::2"$/m);
    // A port: a number, TCP unless said; refused before anything is traced.
    await rejectsWith(d.rt().Trace({ sandbox_id: 'tr-a', destination: '10.244.0.1', port: '80/icmp' }), grpc.status.INVALID_ARGUMENT, /^port "80\/icmp": want a port 1-65535, optionally \/TCP, \/UDP or \/SCTP/);
    await rejectsWith(d.rt().Trace({ from_node: true, destination: '10.244.0.1', port: '70000' }), grpc.status.INVALID_ARGUMENT, /port "70000"/);
    const p = knictl('--socket', d.socket, 'trace', 'tr-a', '10.244.0.1', '--port', 'http');
    assert.equal(p.status, 1);
    assert.match(p.stderr, /^knictl: INVALID_ARGUMENT: port "http": want a port/m);
    assert.equal((await d.rt().Trace({ sandbox_id: 'tr-a', destination: addressesOf(b.net)[0], port: '53/udp' })).ok, true, 'a port outside Kubernetes: nothing more to judge');
  });
});
