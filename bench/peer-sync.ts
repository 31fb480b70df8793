// What one sync of the routes to other nodes' pods costs as the cluster grows: kni's
// PeerNetwork.sync with N synthetic peers (a /24 and a /64 each), in a throwaway node netns,
// host-gw (peers on a connected subnet: one route per podCIDR) and vxlan (a route, a neighbour
// and an FDB entry per peer). The first sync installs everything; a full check (the kernel's
// notices, a relist) reads the kernel and compares; the periodic check does it one part at a
// time (CHECK_SLICES: one every 2 s, its routes compared a slice per sync); a Node event (one peer joining, then leaving) writes only
// the difference. Beside them, the check of every pair of claims for overlaps that each sync
// ran before contested-cidrs.ts, and the live heap kni's routes hold per peer (what each of the
// daemon's garbage collections walks).
//   node dist/bench/peer-sync.js [--nodes 100,1000,5000] [--rounds 5]
import { execFileSync } from 'node:child_process';
import v8 from 'node:v8';
import vm from 'node:vm';
import { Command } from 'commander';
import { Config, defaultConfig } from '../plugin/core/config';
import { Cidr, cidrsOverlap, parseCidr } from '../plugin/ipam/ip';
import { NetlinkSocket } from '../plugin/netlink/socket';
import { Check, CHECK_SLICES, NodeView, PeerNetwork } from '../plugin/node/peer-routes';
import { runInNodeNetns } from './run-netns-mount';
import { percentile } from './stats';

const ms = (t: bigint): number => Number(process.hrtime.bigint() - t) / 1e6;

/** The live heap after a full collection (what each GC of the daemon walks). */
function liveHeap(): number {
  v8.setFlagsFromString('--expose_gc');
  const gc = vm.runInNewContext('gc') as () => void;
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

function peersOf(n: number): NodeView[] {
  return Array.from({ length: n }, (_, k) => {
    const i = k + 1;
    return { name: `node-${i}`, internalIPs: [`172.20.${i >> 8}.${i & 255}`, `fd00:20::${i.toString(16)}`], podCidrs: [`10.${100 + (i >> 8)}.${i & 255}.0/24`, `fd00:10:${i.toString(16)}::/64`] };
  });
}

/** The overlap check as it was: every claim against every other node's. */
function pairwise(peers: NodeView[]): number {
  const claims = peers.flatMap((p) => p.podCidrs.map((t) => ({ node: p.name, cidr: parseCidr(t) as Cidr })));
  let found = 0;
  for (const c of claims) if (claims.find((o) => o.node !== c.node && cidrsOverlap(o.cidr, c.cidr))) found++;
  return found;
}

function inner(sizes: number[], rounds: number): void {
  // A veth (no dummy module on every kernel) as the node's link to the other nodes.
  execFileSync('ip', ['link', 'add', 'underlay0', 'type', 'veth', 'peer', 'name', 'underlay1']);
  execFileSync('ip', ['link', 'set', 'underlay1', 'up']);
  execFileSync('ip', ['addr', 'add', '172.20.255.254/16', 'dev', 'underlay0']);
  execFileSync('ip', ['addr', 'add', 'fd00:20::ffff/64', 'dev', 'underlay0', 'nodad']);
  execFileSync('ip', ['link', 'set', 'underlay0', 'up']);
  const sock = new NetlinkSocket();
  const self: NodeView = { name: 'self', internalIPs: ['172.20.255.254', 'fd00:20::ffff'], podCidrs: ['10.99.0.0/24', 'fd00:99::/64'] };
  console.log('| peers | backend | first sync (installs) ms | full check p50 / max ms | a part of the periodic check p50 / max ms, its longest sync | a Node joining, then leaving: p50 / max ms | pairwise overlap check alone ms | kni\'s heap per peer |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const n of sizes) {
    const peers = peersOf(n);
    const t0 = process.hrtime.bigint();
    pairwise(peers);
    const pairMs = ms(t0);
    for (const backend of ['host-gw', 'vxlan'] as const) {
      const cfg: Config = { ...defaultConfig(), backend, ranges: self.podCidrs.map(parseCidr) };
      const heapBefore = liveHeap();
      const net = new PeerNetwork(sock, cfg);
      let t = process.hrtime.bigint();
      const status = net.sync(self, [self, ...peers]);
      const first = ms(t);
      const bad = status.filter((s) => s.state !== 'installed');
      if (bad.length) throw new Error(`${bad.length} routes not installed: ${bad[0].destination} ${bad[0].error}`);
      const next: number[] = [];
      for (let r = 0; r < rounds; r++) {
        t = process.hrtime.bigint();
        net.sync(self, [self, ...peers]);
        next.push(ms(t));
      }
      // A part goes on a slice per sync until done (the node agent's next turns).
      const parts: number[] = [];
      const slices: number[] = [];
      for (let r = 0; r < rounds; r++) {
        for (const part of CHECK_SLICES) {
          let total = 0;
          let check: Check = part;
          do {
            t = process.hrtime.bigint();
            net.sync(self, [self, ...peers], check);
            slices.push(ms(t));
            total += slices[slices.length - 1];
            check = 'difference';
          } while (net.pendingWrites());
          parts.push(total);
        }
      }
      // As the node agent calls it: the Nodes by name, kept by the watch, and the name that changed.
      const events: number[] = [];
      const all = new Map([self, ...peers].map((p) => [p.name, p]));
      for (let r = 0; r < rounds; r++) {
        const joining: NodeView = { name: `joining-${r}`, internalIPs: ['172.20.254.1', 'fd00:20::fe01'], podCidrs: [`10.99.${100 + r}.0/24`, `fd00:99:${100 + r}::/64`] };
        all.set(joining.name, joining);
        t = process.hrtime.bigint();
        net.apply(self, all, 'difference', new Set([joining.name]));
        events.push(ms(t));
        const st = net.status();
        if (st.filter((x) => x.node === joining.name && x.state === 'installed').length !== 2) throw new Error(`the joining node's routes were not installed: ${JSON.stringify(st.filter((x) => x.node === joining.name))}`);
        all.delete(joining.name);
        t = process.hrtime.bigint();
        net.apply(self, all, 'difference', new Set([joining.name]));
        events.push(ms(t));
      }
      const perPeer = (liveHeap() - heapBefore) / n;
      net.teardown();
      console.log(`| ${n} | ${backend} | ${first.toFixed(1)} | ${percentile(next, 50).toFixed(1)} / ${Math.max(...next).toFixed(1)} | ${percentile(parts, 50).toFixed(1)} / ${Math.max(...parts).toFixed(1)}, ${Math.max(...slices).toFixed(1)} | ${percentile(events, 50).toFixed(1)} / ${Math.max(...events).toFixed(1)} | ${pairMs.toFixed(1)} | ${(perPeer / 1000).toFixed(1)} kB |`);
    }
  }
  sock.close();
}

const program = new Command()
  .option('--nodes <list>', 'peer counts', '100,1000,5000')
  .option('--rounds <n>', 'compare-only syncs per size', '5')
  .option('--inner', 'run inside the node netns (internal)')
  .parse();
const o = program.opts();
const sizes = String(o.nodes).split(',').map(Number);
if (o.inner) inner(sizes, Number(o.rounds));
else {
  if (process.getuid?.() !== 0) throw new Error('peer-sync needs root: it makes a network namespace');
  if (runInNodeNetns(`kps${process.pid.toString(36)}`, __filename, ['--inner', '--nodes', sizes.join(','), '--rounds', String(o.rounds)]) !== 0) process.exitCode = 1;
}
