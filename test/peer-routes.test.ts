// Routes to other nodes' pods on the real kernel: two kni nodes (each a daemon in its own node
// netns), their pods, and PeerNetwork.sync run inside each node netns as the node agent runs
// it. host-gw where the nodes share a subnet; vxlan (chosen by auto) where a router joins two
// subnets; stale kni routes removed; a peer removed takes its routes, FDB and neighbours along.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { Config, parseConfig } from '../plugin/core/config';
import { NetlinkSocket } from '../plugin/netlink/socket';
import { NodeView, PeerNetwork } from '../plugin/node/peer-routes';
import { netlinkIn } from './helpers/netlink-in';
import { inNetns, ping, RUN, sh, trySh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

const RANGES = [['10.61.1.0/24', 'fd00:61:1::/64'], ['10.61.2.0/24', 'fd00:61:2::/64']];

interface KniNode {
  d: TestDaemon;
  sock: NetlinkSocket;
  cfg: Config;
  peers: PeerNetwork;
  view: NodeView;
  pod: { netns: string; v4: string; v6: string };
}

async function kniNode(i: number, backend: string): Promise<KniNode> {
  const d = await TestDaemon.start({ ranges: RANGES[i], masquerade: false });
  const kni = d.kni();
  const { netns_path } = await kni.CreateNetwork({ name: `pod${i}`, namespace: 'default' });
  const net = await d.rt().Attach({ sandbox_id: `${RUN}-pod${i}`, netns_path, pod: { name: `pod${i}`, namespace: 'default', uid: `uid-${i}` } });
  const addrs: string[] = net.interfaces[0].addresses.map((a: any) => a.address);
  const sock = netlinkIn(d.nodeNetns);
  const cfg = parseConfig({ ranges: RANGES[i], backend, vxlan: { device: `${RUN}vx` } });
  return { d, sock, cfg, peers: new PeerNetwork(sock, cfg), view: { name: `node${i}`, internalIPs: [], podCidrs: RANGES[i] }, pod: { netns: netns_path, v4: addrs[0], v6: addrs[1] } };
}

/** Counts the requests made on a socket (dumps are not requests) until restored. */
function countWrites(sock: NetlinkSocket): { count: number; restore: () => void } {
  const exec = sock.exec.bind(sock);
  const c = {
    count: 0,
    restore: () => Object.assign(sock, { exec }),
  };
  // request() sends through exec(): each request is counted once, there.
  Object.assign(sock, { exec: (reqs: Parameters<NetlinkSocket['exec']>[0]) => ((c.count += reqs.length), exec(reqs)) });
  return c;
}

/** What fn's log lines say (kni logs to stdout). */
function captureStdout(fn: () => void): string {
  const write = process.stdout.write;
  let out = '';
  process.stdout.write = ((chunk: string | Uint8Array) => ((out += chunk.toString()), true)) as typeof process.stdout.write;
  try {
    fn();
  } finally {
    process.stdout.write = write;
  }
  return out;
}

/** A Node event's sync (these names changed), then syncs until nothing waits: what they logged, and how many more it took. */
function eventThenRest(n: KniNode, all: Map<string, NodeView>, changed: string[]): { logged: string; syncs: number } {
  let syncs = 0;
  const logged = captureStdout(() => {
    n.peers.apply(n.view, all, 'difference', new Set(changed));
    while (n.peers.pendingWrites() && syncs++ < 200) n.peers.apply(n.view, all, 'difference', new Set());
  });
  return { logged, syncs };
}

const routesIn = (netns: string, family: '-4' | '-6'): string => inNetns(netns, 'ip', [family, 'route', 'show', 'proto', '107']).out;

function both(a: KniNode, b: KniNode): void {
  a.peers.sync(a.view, [a.view, b.view]);
  b.peers.sync(b.view, [a.view, b.view]);
}

function reachable(a: KniNode, b: KniNode): void {
  for (const [from, to] of [[a, b], [b, a]]) {
    assert.ok(ping(from.pod.netns, to.pod.v4), `${from.pod.v4} cannot ping ${to.pod.v4}:\n${routesIn(from.d.nodeNetns, '-4')}`);
    assert.ok(ping(from.pod.netns, to.pod.v6), `${from.pod.v6} cannot ping ${to.pod.v6}:\n${routesIn(from.d.nodeNetns, '-6')}`);
  }
}

describe('routes to other nodes\' pods (real kernel)', () => {
  describe('host-gw: nodes on one subnet', () => {
    let a: KniNode;
    let b: KniNode;
    before(async () => {
      a = await kniNode(0, 'auto');
      b = await kniNode(1, 'auto');
      sh('ip', ['link', 'add', `${RUN}ha`, 'netns', a.d.nodeNetnsName, 'type', 'veth', 'peer', 'name', `${RUN}hb`, 'netns', b.d.nodeNetnsName]);
      for (const [n, link, v4, v6] of [[a, `${RUN}ha`, '192.168.61.1', 'fd00:6100::1'], [b, `${RUN}hb`, '192.168.61.2', 'fd00:6100::2']] as const) {
        sh('ip', ['-n', n.d.nodeNetnsName, 'addr', 'add', `${v4}/24`, 'dev', link]);
        sh('ip', ['-n', n.d.nodeNetnsName, '-6', 'addr', 'add', `${v6}/64`, 'dev', link, 'nodad']);
        sh('ip', ['-n', n.d.nodeNetnsName, 'link', 'set', link, 'up']);
        n.view.internalIPs = [v4, v6];
      }
      // A new link's IPv6 answers neighbour solicitations only once its link-local address
      // has passed DAD (about a second): wait for that, it is not what is tested.
      await waitFor(() => inNetns(a.d.nodeNetns, 'ping', ['-c', '1', '-W', '1', 'fd00:6100::2']).ok, 10_000, () => 'node link IPv6 never came up');
    });
    after(() => {
      for (const n of [a, b]) {
        n?.sock.close();
        n?.d.cleanup();
      }
    });

    it('pods on the two nodes reach each other over IPv4 and IPv6 through routes via the peer', () => {
      assert.ok(!ping(a.pod.netns, b.pod.v4), 'reachable before any route: the test proves nothing');
      both(a, b);
      const st = a.peers.status();
      assert.deepEqual(st.map((s) => [s.destination, s.backend, s.via, s.state]), [['10.61.2.0/24', 'host-gw', '192.168.61.2', 'installed'], ['fd00:61:2::/64', 'host-gw', 'fd00:6100::2', 'installed']]);
      assert.match(routesIn(a.d.nodeNetns, '-4'), /10\.61\.2\.0\/24 via 192\.168\.61\.2/);
      assert.match(routesIn(a.d.nodeNetns, '-6'), /fd00:61:2::\/64 via fd00:6100::2/);
      reachable(a, b);
    });

    it('a sync removes a stale kni route (a restart after a node went away) and leaves other routes alone', () => {
      sh('ip', ['-n', a.d.nodeNetnsName, 'route', 'add', '10.99.0.0/24', 'via', '192.168.61.2', 'proto', '107']);
      sh('ip', ['-n', a.d.nodeNetnsName, 'route', 'add', '10.98.0.0/24', 'via', '192.168.61.2']);
      both(a, b);
      assert.doesNotMatch(routesIn(a.d.nodeNetns, '-4'), /10\.99\.0\.0/);
      assert.match(inNetns(a.d.nodeNetns, 'ip', ['-4', 'route']).out, /10\.98\.0\.0\/24/, 'a route kni did not make was removed');
      reachable(a, b);
    });

    it('routes taken by their link going down are installed again by the next sync, which says so; a sync finding all in place writes nothing', async () => {
      const link = `${RUN}ha`;
      const writes = countWrites(a.sock);
      try {
        both(a, b);
        assert.equal(writes.count, 0, 'a sync with every route in place wrote to the kernel');
        sh('ip', ['-n', a.d.nodeNetnsName, 'link', 'set', link, 'down']);
        sh('ip', ['-n', a.d.nodeNetnsName, 'link', 'set', link, 'up']);
        assert.equal(routesIn(a.d.nodeNetns, '-4').trim(), '', 'the link going down left the route: the test proves nothing');
        // IPv6 addresses go with the link too (keep_addr_on_down 0): the node's own network manager puts them back.
        sh('ip', ['-n', a.d.nodeNetnsName, '-6', 'addr', 'replace', 'fd00:6100::1/64', 'dev', link, 'nodad']);
        const logged = captureStdout(() => both(a, b));
        assert.match(logged, /"msg":"the route to node node1's pods 10\.61\.2\.0\/24 was gone from the kernel; installed again"/);
        assert.match(routesIn(a.d.nodeNetns, '-4'), /10\.61\.2\.0\/24 via 192\.168\.61\.2/);
        assert.deepEqual(a.peers.status().map((s) => s.state), ['installed', 'installed']);
      } finally {
        writes.restore();
      }
      await waitFor(() => inNetns(a.d.nodeNetns, 'ping', ['-c', '1', '-W', '1', 'fd00:6100::2']).ok, 10_000, () => 'node link IPv6 never came up again');
      reachable(a, b);
    });


    it('an InternalIP spelled otherwise than the kernel spells it (fd00:6100:0:0::2) is the same address: the route stays, and the periodic sync writes nothing', () => {
      const spelled: NodeView = { ...b.view, internalIPs: ['192.168.61.2', 'fd00:6100:0:0:0:0:0:2'] };
      a.peers.sync(a.view, [a.view, spelled]);
      const writes = countWrites(a.sock);
      try {
        a.peers.sync(a.view, [a.view, spelled]);
        assert.equal(writes.count, 0, 'a route in place via the same address, spelled otherwise, was written again');
      } finally {
        writes.restore();
      }
      assert.match(routesIn(a.d.nodeNetns, '-6'), /fd00:61:2::\/64 via fd00:6100::2/);
      assert.deepEqual(a.peers.status().map((s) => s.state), ['installed', 'installed']);
      reachable(a, b);
    });
    it('backend host-gw with a peer off-subnet: the route is reported unreachable, not made', () => {
      const far: NodeView = { name: 'far', internalIPs: ['172.31.9.9'], podCidrs: ['10.61.9.0/24'] };
      const cfgBackend = (a.peers as any).cfg.backend;
      (a.peers as any).cfg.backend = 'host-gw';
      try {
        const st = a.peers.sync(a.view, [a.view, b.view, far]);
        const farSt = st.find((s) => s.node === 'far')!;
        assert.equal(farSt.state, 'unreachable');
        assert.match(farSt.error, /172\.31\.9\.9 is not on a subnet this node is connected to/);
        assert.doesNotMatch(routesIn(a.d.nodeNetns, '-4'), /10\.61\.9\.0/);
      } finally {
        (a.peers as any).cfg.backend = cfgBackend;
      }
    });

    it('a Node whose podCIDR would take over a route the node lives on, or that another Node claims, is refused with the reason, and an InternalIP that is no address is named; nothing is replaced', () => {
      const ns = a.d.nodeNetnsName;
      sh('ip', ['-n', ns, 'route', 'add', 'default', 'via', '192.168.61.2']);
      sh('ip', ['-n', ns, 'route', 'add', '10.61.8.0/24', 'via', '192.168.61.2', 'proto', 'static']);
      try {
        const notKnis = () => inNetns(a.d.nodeNetns, 'ip', ['-4', 'route']).out.split('\n').filter((l) => !l.includes('proto 107')).join('\n');
        const before = notKnis();
        const at = '192.168.61.2';
        const bad: NodeView[] = [
          { name: 'everything', internalIPs: [at], podCidrs: ['0.0.0.0/0', '::/0'] },
          { name: 'underlay', internalIPs: [at], podCidrs: ['192.168.61.0/25'] },
          { name: 'twin', internalIPs: [at], podCidrs: ['10.61.2.0/24'] },
          { name: 'admin', internalIPs: [at], podCidrs: ['10.61.8.0/24'] },
          { name: 'named', internalIPs: ['node-x.example'], podCidrs: ['10.61.7.0/24'] },
        ];
        const st = a.peers.sync(a.view, [a.view, b.view, ...bad]);
        const errorOf = (node: string, dst: string) => st.find((x) => x.node === node && x.destination === dst)!;
        for (const [node, dst, re] of [
          ['everything', '0.0.0.0/0', /^podCIDR 0\.0\.0\.0\/0 is a default route, never a pod range$/],
          ['everything', '::/0', /^podCIDR ::\/0 is a default route/],
          ['underlay', '192.168.61.0/25', /^overlaps this node's own subnet 192\.168\.61\.1\/24$/],
          ['twin', '10.61.2.0/24', /^overlaps node node1's podCIDR 10\.61\.2\.0\/24$/],
          ['node1', '10.61.2.0/24', /^overlaps node twin's podCIDR 10\.61\.2\.0\/24$/],
          ['admin', '10.61.8.0/24', /^a route to 10\.61\.8\.0\/24 that kni did not make is in place \(proto static\); kni does not replace it$/],
        ] as const) {
          const x = errorOf(node, dst);
          assert.equal(x.state, 'failed', `${node} ${dst}`);
          assert.match(x.error, re);
        }
        const named = errorOf('named', '10.61.7.0/24');
        assert.equal(named.state, 'unreachable');
        assert.match(named.error, /no IPv4 InternalIP to reach over vxlan \("node-x\.example" is not an IP address\)$/);
        assert.equal(notKnis(), before, 'a route the node had was replaced or removed');
        assert.doesNotMatch(routesIn(a.d.nodeNetns, '-4'), /10\.61\.2\.0/, 'the contested podCIDR was routed to one of its claimants');
        // The bad Nodes gone, the peer's route comes back.
        both(a, b);
        assert.match(routesIn(a.d.nodeNetns, '-4'), /10\.61\.2\.0\/24 via 192\.168\.61\.2/);
      } finally {
        trySh('ip', ['-n', ns, 'route', 'del', 'default']);
        trySh('ip', ['-n', ns, 'route', 'del', '10.61.8.0/24']);
        both(a, b);
      }
      reachable(a, b);
    });

    it("a Node event's sync writes only what changed: a peer added is its two routes (nothing read but the node's addresses), a route someone else made to its podCIDR is not replaced, and a peer gone is its routes deleted, whose notices kni knows for its own", () => {
      both(a, b);
      const ns = a.d.nodeNetnsName;
      const others = Array.from({ length: 50 }, (_, i): NodeView => ({ name: `other-${i}`, internalIPs: ['192.168.61.2'], podCidrs: [`10.62.${i}.0/24`] }));
      a.peers.sync(a.view, [a.view, b.view, ...others], 'difference');
      while (a.peers.pendingWrites()) a.peers.sync(a.view, [a.view, b.view, ...others], 'difference');
      const fresh: NodeView = { name: 'fresh', internalIPs: ['192.168.61.2', 'fd00:6100::2'], podCidrs: ['10.61.9.0/24', 'fd00:61:9::/64'] };
      const writes = countWrites(a.sock);
      let st;
      try {
        st = a.peers.sync(a.view, [a.view, b.view, ...others, fresh], 'difference');
      } finally {
        writes.restore();
      }
      assert.equal(writes.count, 2, 'a new peer with a /24 and a /64 is two route writes');
      assert.deepEqual(st.filter((x) => x.node === 'fresh').map((x) => x.state), ['installed', 'installed']);
      assert.match(routesIn(a.d.nodeNetns, '-4'), /10\.61\.9\.0\/24 via 192\.168\.61\.2/);
      // Someone else's route to a new peer's podCIDR stays, and the peer's route is refused.
      sh('ip', ['-n', ns, 'route', 'add', '10.61.10.0/24', 'via', '192.168.61.2', 'proto', 'static']);
      try {
        const taken: NodeView = { name: 'taken', internalIPs: ['192.168.61.2'], podCidrs: ['10.61.10.0/24'] };
        st = a.peers.sync(a.view, [a.view, b.view, ...others, fresh, taken], 'difference');
        const t = st.find((x) => x.node === 'taken')!;
        assert.equal(t.state, 'failed');
        assert.match(t.error, /^a route to 10\.61\.10\.0\/24 that kni did not make is in place; kni does not replace it$/);
        assert.match(inNetns(a.d.nodeNetns, 'ip', ['-4', 'route', 'show', '10.61.10.0/24']).out, /proto static/);
        // The periodic check names its protocol.
        st = a.peers.sync(a.view, [a.view, b.view, ...others, fresh, taken]);
        assert.match(st.find((x) => x.node === 'taken')!.error, /\(proto static\)/);
      } finally {
        trySh('ip', ['-n', ns, 'route', 'del', '10.61.10.0/24']);
      }
      const gone = countWrites(a.sock);
      try {
        a.peers.sync(a.view, [a.view, b.view, ...others], 'difference');
      } finally {
        gone.restore();
      }
      assert.equal(gone.count, 2, 'a peer gone is its two routes deleted');
      assert.doesNotMatch(routesIn(a.d.nodeNetns, '-4'), /10\.61\.9\.0/);
      assert.equal(a.peers.deletedItself('10.61.9.0/24'), true);
      assert.equal(a.peers.deletedItself('10.61.9.0/24'), false, 'a deletion answers once');
      a.peers.sync(a.view, [a.view, b.view]);
      assert.doesNotMatch(routesIn(a.d.nodeNetns, '-4'), /10\.62\./);
    });

    it("as the node agent calls it (the Nodes by name, the names a watch event changed): only the named peers are looked at; the counts, the routes not installed and the routed CIDRs' change follow each peer", () => {
      both(a, b);
      const all = new Map<string, NodeView>([a.view, b.view].map((v) => [v.name, v]));
      a.peers.apply(a.view, all, 'all');
      const base = a.peers.summary().counts.get('host-gw installed') ?? 0;
      a.peers.routedChange();
      const p1: NodeView = { name: 'named-1', internalIPs: ['192.168.61.2', 'fd00:6100::2'], podCidrs: ['10.61.21.0/24', 'fd00:61:21::/64'] };
      const p2: NodeView = { name: 'named-2', internalIPs: ['192.168.61.2'], podCidrs: ['10.61.22.0/24'] };
      all.set(p1.name, p1);
      all.set(p2.name, p2);
      // Only named-1 is named: named-2 waits for its own event.
      a.peers.apply(a.view, all, 'difference', new Set([p1.name]));
      assert.deepEqual(a.peers.status().filter((x) => x.node.startsWith('named-')).map((x) => `${x.node} ${x.state}`), ['named-1 installed', 'named-1 installed']);
      assert.equal(a.peers.summary().counts.get('host-gw installed'), base + 2);
      let change = a.peers.routedChange();
      assert.deepEqual(change.added.map((c) => c.text).sort(), ['10.61.21.0/24', 'fd00:61:21::/64']);
      assert.deepEqual(change.removed, []);
      assert.equal(change.cidrs.length, a.peers.status().filter((x) => x.state !== 'failed').length);
      // A peer whose route is refused is counted and listed as such, and not routed.
      const far: NodeView = { name: 'named-far', internalIPs: ['192.168.61.2'], podCidrs: ['0.0.0.0/0'] };
      all.set(far.name, far);
      a.peers.apply(a.view, all, 'difference', new Set([p2.name, far.name]));
      assert.deepEqual([...a.peers.summary().bad].map((x) => `${x.node} ${x.state}`), ['named-far failed']);
      assert.equal(a.peers.summary().counts.get('none failed'), 1);
      assert.deepEqual(a.peers.routedChange().added.map((c) => c.text), ['10.61.22.0/24']);
      assert.equal(a.peers.summary().counts.get('host-gw installed'), base + 3);
      // Gone: its counts and CIDRs go with it.
      all.delete(p1.name);
      all.delete(far.name);
      const version = a.peers.summary().version;
      a.peers.apply(a.view, all, 'difference', new Set([p1.name, far.name]));
      change = a.peers.routedChange();
      assert.deepEqual(change.removed.map((c) => c.text).sort(), ['10.61.21.0/24', 'fd00:61:21::/64']);
      assert.equal(a.peers.summary().counts.get('none failed'), undefined);
      assert.equal(a.peers.summary().bad.size, 0);
      assert.equal(a.peers.summary().counts.get('host-gw installed'), base + 1);
      assert.notEqual(a.peers.summary().version, version);
      assert.doesNotMatch(routesIn(a.d.nodeNetns, '-4'), /10\.61\.21\./);
      // The periodic check finding every route in place changes nothing to count or report.
      const settled = a.peers.summary().version;
      for (const slice of ['routes4', 'routes6', 'neighbours4', 'neighbours6', 'fdb'] as const) a.peers.apply(a.view, all, slice);
      assert.equal(a.peers.summary().version, settled);
      a.peers.sync(a.view, [a.view, b.view]);
      assert.doesNotMatch(routesIn(a.d.nodeNetns, '-4'), /10\.61\.22\./);
    });

    it('a bulk join is written a slice at a time: 2,000 peers at once need several syncs, each leaving the rest for the next, and all end installed', () => {
      both(a, b);
      const bulk = Array.from({ length: 2000 }, (_, i): NodeView => ({ name: `bulk-${i}`, internalIPs: ['192.168.61.2'], podCidrs: [`10.${70 + (i >> 8)}.${i & 255}.0/24`] }));
      const all = [a.view, b.view, ...bulk];
      let syncs = 1;
      let st = a.peers.sync(a.view, all, 'difference');
      assert.ok(a.peers.pendingWrites(), 'one sync wrote 2,000 routes');
      while (a.peers.pendingWrites() && syncs < 1000) {
        st = a.peers.sync(a.view, all, 'difference');
        syncs++;
      }
      assert.equal(st.filter((x) => x.node.startsWith('bulk-') && x.state === 'installed').length, 2000, `after ${syncs} syncs`);
      assert.equal(inNetns(a.d.nodeNetns, 'ip', ['-4', 'route', 'show', 'proto', '107']).out.trim().split('\n').length, 2001);
      a.peers.sync(a.view, [a.view, b.view], 'difference');
      while (a.peers.pendingWrites()) a.peers.sync(a.view, [a.view, b.view], 'difference');
      assert.equal(routesIn(a.d.nodeNetns, '-4').trim().split('\n').length, 1);
      reachable(a, b);
    });

    it('the periodic check in parts: one family\'s routes read and put back at a time, a stale route of that family removed, the other family left for its own part', () => {
      both(a, b);
      const ns = a.d.nodeNetnsName;
      sh('ip', ['-n', ns, 'route', 'del', '10.61.2.0/24']);
      sh('ip', ['-n', ns, 'route', 'add', '10.99.0.0/24', 'via', '192.168.61.2', 'proto', '107']);
      sh('ip', ['-n', ns, '-6', 'route', 'del', 'fd00:61:2::/64']);
      a.peers.sync(a.view, [a.view, b.view], 'routes6');
      assert.doesNotMatch(routesIn(a.d.nodeNetns, '-4'), /10\.61\.2\.0/, 'the IPv6 part put an IPv4 route back');
      assert.match(routesIn(a.d.nodeNetns, '-6'), /fd00:61:2::\/64 via fd00:6100::2/);
      const logged = captureStdout(() => a.peers.sync(a.view, [a.view, b.view], 'routes4'));
      assert.match(logged, /"msg":"the route to node node1's pods 10\.61\.2\.0\/24 was gone from the kernel; installed again"/);
      assert.match(routesIn(a.d.nodeNetns, '-4'), /10\.61\.2\.0\/24 via 192\.168\.61\.2/);
      assert.doesNotMatch(routesIn(a.d.nodeNetns, '-4'), /10\.99\.0\.0/);
      assert.deepEqual(a.peers.status().map((x) => x.state), ['installed', 'installed']);
      reachable(a, b);
    });

    it('a part of the check goes on a slice at a time, with Node events between: the routes read are put back, a stale one goes, what joined or left meanwhile is left as its event wrote it', () => {
      const many = Array.from({ length: 40 }, (_, i): NodeView => ({ name: `many-${i}`, internalIPs: ['192.168.61.2'], podCidrs: [`10.62.${i}.0/24`] }));
      const all = new Map([a.view, b.view, ...many].map((v) => [v.name, v]));
      a.peers.apply(a.view, all);
      const ns = a.d.nodeNetnsName;
      const sliceMs = a.peers.checkSliceMs;
      try {
        a.peers.checkSliceMs = 0;
        sh('ip', ['-n', ns, 'route', 'del', '10.62.30.0/24']);
        sh('ip', ['-n', ns, 'route', 'add', '10.99.1.0/24', 'via', '192.168.61.2', 'proto', '107']);
        a.peers.apply(a.view, all, 'routes4');
        assert.ok(a.peers.pendingWrites(), 'the part was done in one sync');
        // Between slices: one peer joins, one not yet compared leaves.
        const joining: NodeView = { name: 'joining', internalIPs: ['192.168.61.2'], podCidrs: ['10.62.200.0/24'] };
        all.set(joining.name, joining);
        all.delete('many-35');
        const { logged, syncs } = eventThenRest(a, all, ['joining', 'many-35']);
        assert.ok(syncs > 10, `the part took ${syncs} more syncs`);
        assert.match(logged, /10\.62\.30\.0\/24 was gone from the kernel; installed again/);
        assert.doesNotMatch(logged, /10\.62\.(35|200)\.0/, 'what an event wrote was taken for drift');
        const v4 = routesIn(a.d.nodeNetns, '-4');
        assert.match(v4, /10\.62\.30\.0\/24 via 192\.168\.61\.2/);
        assert.match(v4, /10\.62\.200\.0\/24 via 192\.168\.61\.2/);
        assert.doesNotMatch(v4, /10\.62\.35\.0|10\.99\.1\.0/);
        assert.equal(a.peers.status().filter((x) => x.state !== 'installed').length, 0);
        assert.equal(a.peers.summary().counts.get('host-gw installed'), 2 + 39 + 1);
      } finally {
        a.peers.checkSliceMs = sliceMs;
        a.peers.sync(a.view, [a.view, b.view]);
      }
      assert.equal(routesIn(a.d.nodeNetns, '-4').trim().split('\n').length, 1);
    });

    it('a peer removed: its routes go', () => {
      a.peers.sync(a.view, [a.view]);
      assert.equal(routesIn(a.d.nodeNetns, '-4').trim(), '');
      assert.equal(routesIn(a.d.nodeNetns, '-6').trim(), '');
      assert.ok(!ping(a.pod.netns, b.pod.v4));
    });
  });

  describe('vxlan: nodes on two subnets joined by a router (auto picks vxlan)', () => {
    let a: KniNode;
    let b: KniNode;
    const router = `${RUN}-router`;
    before(async () => {
      a = await kniNode(0, 'auto');
      b = await kniNode(1, 'auto');
      sh('ip', ['netns', 'add', router]);
      sh('ip', ['netns', 'exec', router, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
      for (const [n, i] of [[a, 1], [b, 2]] as const) {
        const link = `${RUN}r${i}`;
        sh('ip', ['link', 'add', link, 'netns', n.d.nodeNetnsName, 'type', 'veth', 'peer', 'name', `${RUN}rr${i}`, 'netns', router]);
        sh('ip', ['-n', router, 'addr', 'add', `192.168.7${i}.254/24`, 'dev', `${RUN}rr${i}`]);
        sh('ip', ['-n', router, 'link', 'set', `${RUN}rr${i}`, 'up']);
        sh('ip', ['-n', n.d.nodeNetnsName, 'addr', 'add', `192.168.7${i}.1/24`, 'dev', link]);
        sh('ip', ['-n', n.d.nodeNetnsName, 'link', 'set', link, 'up']);
        sh('ip', ['-n', n.d.nodeNetnsName, 'route', 'add', 'default', 'via', `192.168.7${i}.254`]);
        n.view.internalIPs = [`192.168.7${i}.1`];
      }
    });
    after(() => {
      for (const n of [a, b]) {
        n?.sock.close();
        n?.d.cleanup();
      }
      trySh('ip', ['netns', 'del', router]);
    });

    it('pods reach each other over IPv4 and IPv6 inside the overlay; the router sees only vxlan between the nodes', () => {
      assert.ok(!ping(a.pod.netns, b.pod.v4), 'reachable before any route: the test proves nothing');
      both(a, b);
      const st = a.peers.status();
      assert.deepEqual(st.map((s) => [s.destination, s.backend, s.via, s.state]), [['10.61.2.0/24', 'vxlan', '10.61.2.1', 'installed'], ['fd00:61:2::/64', 'vxlan', 'fd00:61:2::1', 'installed']]);
      const dev = inNetns(a.d.nodeNetns, 'ip', ['-d', 'link', 'show', `${RUN}vx`]).out;
      assert.match(dev, /vxlan id 4096 local 192\.168\.71\.1 dev \S+ srcport \d+ \d+ dstport 8472 nolearning/);
      assert.match(dev, /mtu 1450/, 'the vxlan MTU is not the underlay MTU less the encapsulation');
      assert.match(inNetns(a.d.nodeNetns, 'bridge', ['fdb', 'show', 'dev', `${RUN}vx`]).out, /dst 192\.168\.72\.1 self permanent/);
      // The router has no route to any pod range: only encapsulated traffic can cross it.
      assert.doesNotMatch(inNetns(router, 'ip', ['route']).out, /10\.61\./);
      reachable(a, b);
      // The periodic sync: device, neighbours, FDB and routes in place, so nothing is written.
      const writes = countWrites(a.sock);
      try {
        both(a, b);
        assert.equal(writes.count, 0, 'a sync with the overlay in place wrote to the kernel');
      } finally {
        writes.restore();
      }
    });

    it('a TCP stream of full-size packets crosses the overlay both ways: the pods keep the underlay\'s MTU (backend auto), and the node\'s "fragmentation needed" brings each flow down to the vxlan device\'s', async () => {
      both(a, b);
      const mtuOf = (netns: string, link: string) => Number(/ mtu (\d+)/.exec(inNetns(netns, 'ip', ['-o', 'link', 'show', link]).out)?.[1]);
      const podMtu = mtuOf(a.pod.netns, 'eth0');
      const overlayMtu = mtuOf(a.d.nodeNetns, `${RUN}vx`);
      assert.ok(podMtu > overlayMtu, `the pods' MTU ${podMtu} fits the overlay's ${overlayMtu}: the test proves nothing`);
      const BYTES = 4 << 20;
      for (const [from, to, ip] of [[a, b, b.pod.v4], [b, a, a.pod.v4], [a, b, b.pod.v6]] as const) {
        // A server in one pod sends BYTES; a client in the other counts what arrives (Node: always here).
        const server = spawn('nsenter', [`--net=${to.pod.netns}`, process.execPath, '-e', `require('net').createServer((s) => s.end(Buffer.alloc(${BYTES}, 7))).listen(5001, '::', () => console.log('up'))`], { stdio: ['ignore', 'pipe', 'inherit'] });
        try {
          await new Promise<void>((resolve, reject) => {
            server.stdout!.once('data', () => resolve());
            server.once('exit', (c) => reject(new Error(`server exited ${c}`)));
          });
          const client = spawnSync('nsenter', [`--net=${from.pod.netns}`, process.execPath, '-e', `let n = 0; require('net').connect(5001, '${ip}').on('data', (d) => (n += d.length)).on('end', () => console.log(n)).on('error', (e) => { console.log(e.message); process.exit(1); })`], { encoding: 'utf8', timeout: 30_000 });
          assert.equal(client.stdout.trim(), String(BYTES), `${from.view.name} → ${ip}: ${client.stdout}${client.stderr}${client.error ?? ''}`);
        } finally {
          server.kill('SIGKILL');
        }
      }
    });

    it('the vxlan device set down (its routes and neighbours go with it): the next sync sets it up and puts them back', () => {
      sh('ip', ['-n', a.d.nodeNetnsName, 'link', 'set', `${RUN}vx`, 'down']);
      assert.equal(routesIn(a.d.nodeNetns, '-4').trim(), '', 'the device going down left its routes: the test proves nothing');
      both(a, b);
      assert.deepEqual(a.peers.status().map((s) => [s.destination, s.state, s.error]), [['10.61.2.0/24', 'installed', ''], ['fd00:61:2::/64', 'installed', '']]);
      assert.match(inNetns(a.d.nodeNetns, 'ip', ['link', 'show', `${RUN}vx`]).out, /[<,]UP[,>]/);
      reachable(a, b);
    });

    it('vxlan.txChecksumOffload: false turns the device\'s transmit checksumming off (as `ethtool -K dev tx off`), and each sync puts it back off; true turns it on; "auto" leaves it', () => {
      const txChecksumming = () => /^tx-checksumming: (on|off)/m.exec(inNetns(a.d.nodeNetns, 'ethtool', ['-k', `${RUN}vx`]).out)?.[1];
      assert.equal(txChecksumming(), 'on', 'the kernel\'s default is off here: the test proves nothing');
      a.cfg.vxlan.txChecksumOffload = false;
      const log = captureStdout(() => both(a, b));
      assert.equal(txChecksumming(), 'off');
      assert.match(log, /"msg":"vxlan device transmit checksum offload turned off".*"setting":"false"/);
      reachable(a, b);
      assert.ok(inNetns(a.d.nodeNetns, 'ethtool', ['-K', `${RUN}vx`, 'tx', 'on']).ok);
      both(a, b);
      assert.equal(txChecksumming(), 'off', 'turned on behind kni\'s back, and left on');
      a.cfg.vxlan.txChecksumOffload = true;
      both(a, b);
      assert.equal(txChecksumming(), 'on');
      // auto on this kernel (6.x) leaves the admin's choice alone.
      assert.ok(inNetns(a.d.nodeNetns, 'ethtool', ['-K', `${RUN}vx`, 'tx', 'off']).ok);
      a.cfg.vxlan.txChecksumOffload = 'auto';
      both(a, b);
      assert.equal(txChecksumming(), 'off');
      reachable(a, b);
    });

    it("a Node event's sync over vxlan writes only the new peer's routes, neighbours and FDB entry, and deletes only a gone peer's", () => {
      both(a, b);
      const fresh: NodeView = { name: 'fresh', internalIPs: ['192.168.72.9', 'fd00:72::9'], podCidrs: ['10.61.9.0/24', 'fd00:61:9::/64'] };
      const writes = countWrites(a.sock);
      try {
        a.peers.sync(a.view, [a.view, b.view, fresh], 'difference');
      } finally {
        writes.restore();
      }
      assert.equal(writes.count, 5, 'two routes, two neighbours and one FDB entry');
      const fdb = () => inNetns(a.d.nodeNetns, 'bridge', ['fdb', 'show', 'dev', `${RUN}vx`]).out;
      assert.match(fdb(), /dst 192\.168\.72\.9/);
      const gone = countWrites(a.sock);
      try {
        a.peers.sync(a.view, [a.view, b.view], 'difference');
      } finally {
        gone.restore();
      }
      assert.equal(gone.count, 5, 'its routes, neighbours and FDB entry deleted');
      assert.doesNotMatch(fdb(), /192\.168\.72\.9/);
      reachable(a, b);
    });

    it('the periodic check in parts: an FDB entry deleted behind kni\'s back is written again by the FDB part, not by the neighbours\' parts', () => {
      both(a, b);
      const dev = `${RUN}vx`;
      const fdb = () => inNetns(a.d.nodeNetns, 'bridge', ['fdb', 'show', 'dev', dev]).out;
      const line = fdb().split('\n').find((l) => /dst 192\.168\.72\./.test(l))!;
      assert.ok(line, fdb());
      const [mac] = line.split(' ');
      const dst = /dst (\S+)/.exec(line)![1];
      sh('ip', ['netns', 'exec', a.d.nodeNetnsName, 'bridge', 'fdb', 'del', mac, 'dev', dev, 'dst', dst]);
      a.peers.sync(a.view, [a.view, b.view], 'neighbours4');
      a.peers.sync(a.view, [a.view, b.view], 'neighbours6');
      assert.doesNotMatch(fdb(), new RegExp(`dst ${dst.replace(/\./g, '\\.')}`));
      a.peers.sync(a.view, [a.view, b.view], 'fdb');
      assert.match(fdb(), new RegExp(`dst ${dst.replace(/\./g, '\\.')}`));
      reachable(a, b);
    });

    it('the FDB part in slices, with Node events between: an entry deleted behind kni\'s back is written again, a stray one goes, what joined or left meanwhile is left as its event wrote it', () => {
      const far = (i: number): NodeView => ({ name: `far-${i}`, internalIPs: [`192.168.80.${i}`], podCidrs: [`10.63.${i}.0/24`] });
      const all = new Map([a.view, b.view, ...Array.from({ length: 30 }, (_, i) => far(i))].map((v) => [v.name, v]));
      a.peers.apply(a.view, all);
      const dev = `${RUN}vx`;
      const ns = a.d.nodeNetnsName;
      const fdb = () => inNetns(a.d.nodeNetns, 'bridge', ['fdb', 'show', 'dev', dev]).out;
      const sliceMs = a.peers.checkSliceMs;
      try {
        a.peers.checkSliceMs = 0;
        const line = fdb().split('\n').find((l) => / dst 192\.168\.80\.5 /.test(l))!;
        assert.ok(line, fdb());
        sh('ip', ['netns', 'exec', ns, 'bridge', 'fdb', 'del', line.split(' ')[0], 'dev', dev, 'dst', '192.168.80.5']);
        sh('ip', ['netns', 'exec', ns, 'bridge', 'fdb', 'append', '0e:00:00:00:00:99', 'dev', dev, 'dst', '192.168.80.250', 'self', 'permanent']);
        a.peers.apply(a.view, all, 'fdb');
        assert.ok(a.peers.pendingWrites(), 'the part was done in one sync');
        all.set('far-40', far(40));
        all.delete('far-25');
        const { logged, syncs } = eventThenRest(a, all, ['far-40', 'far-25']);
        assert.ok(syncs > 10, `the part took ${syncs} more syncs`);
        assert.match(logged, /fdb\/192\.168\.80\.5\//);
        assert.doesNotMatch(logged, /192\.168\.80\.(25|40)\//, 'what an event wrote was taken for drift');
        const now = fdb();
        assert.match(now, / dst 192\.168\.80\.5 /);
        assert.match(now, / dst 192\.168\.80\.40 /);
        assert.doesNotMatch(now, / dst 192\.168\.80\.(25|250) /);
      } finally {
        a.peers.checkSliceMs = sliceMs;
        both(a, b);
      }
      assert.doesNotMatch(fdb(), /192\.168\.80\./);
      reachable(a, b);
    });

    it('a peer removed: routes, neighbours and FDB entries go, and with no vxlan peer left the device too', () => {
      a.peers.sync(a.view, [a.view]);
      assert.equal(routesIn(a.d.nodeNetns, '-4').trim(), '');
      assert.equal(trySh('ip', ['-n', a.d.nodeNetnsName, 'link', 'show', `${RUN}vx`]).ok, false, 'vxlan device left behind');
      both(a, b);
      reachable(a, b);
      a.peers.teardown();
      b.peers.teardown();
      assert.equal(routesIn(b.d.nodeNetns, '-6').trim(), '');
    });
  });
});
