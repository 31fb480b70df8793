// What leaves the pods for outside the cluster is masqueraded, but for the destinations the
// config names in nonMasqueradeCIDRs (ip-masq-agent's setting): there the pod's own address
// arrives. A real "outside" netns behind the node, UDP from a pod to it, the source read there.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { once } from 'node:events';
import { Client } from '../plugin/client/clients';
import { ConfigError, parseConfig } from '../plugin/core/config';
import { parseCidr } from '../plugin/ipam/ip';
import { keepSetDelta, keepSets } from '../plugin/node/masquerade';
import { packageRoot } from '../plugin/server/protos';
import { inNetns, RUN, sh, trySh } from './helpers/sh';
import { knictl } from './helpers/knictl';
import { masqueradeTable } from './helpers/masquerade-table';
import { TestDaemon } from './helpers/test-daemon';

const COMMENT = "kni: masquerade traffic leaving the cluster's pods";

describe('masquerade and nonMasqueradeCIDRs (real kernel, nftables)', () => {
  let d: TestDaemon;
  let rt: Client;
  const outside = `${RUN}-outside`;
  const link = `${RUN.slice(0, 9)}out`;

  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.72.0.0/24'], nonMasqueradeCIDRs: ['192.0.2.0/24', '192.0.2.0/24', '203.0.113.7/32'] });
    rt = d.rt();
    // The outside: one link to the node, an address in a non-masqueraded network and one not,
    // and a route back to the pods (as a network that routes to them would have).
    sh('ip', ['netns', 'add', outside]);
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'add', link, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', outside]);
    for (const [ns, dev, addrs] of [[d.nodeNetnsName, link, ['192.0.2.1/24', '198.51.100.1/24']], [outside, 'eth0', ['192.0.2.10/24', '198.51.100.10/24']]] as const) {
      for (const a of addrs) sh('ip', ['-n', ns, 'addr', 'add', a, 'dev', dev]);
      sh('ip', ['-n', ns, 'link', 'set', dev, 'up']);
    }
    sh('ip', ['-n', outside, 'route', 'add', '10.72.0.0/24', 'via', '192.0.2.1']);
  });
  after(() => {
    trySh('ip', ['netns', 'del', outside]);
    d?.cleanup();
  });

  /** The source address a UDP datagram from the pod arrives with at `to` in the outside netns. */
  async function sourceSeenAt(podNetns: string, to: string): Promise<string> {
    const port = 9000 + Math.floor(Math.random() * 1000);
    const server = spawn('ip', ['netns', 'exec', outside, process.execPath, '-e', `const s=require('dgram').createSocket('udp4');s.on('message',(m,r)=>{process.stdout.write(r.address);process.exit(0)});s.bind(${port},'${to}',()=>process.stdout.write('ready\\n'));setTimeout(()=>process.exit(1),30000)`], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    server.stdout.on('data', (b) => (out += b));
    const exited = once(server, 'exit');
    try {
      while (!out.includes('ready')) {
        if (await Promise.race([once(server.stdout, 'data').then(() => false), exited.then(() => true)])) throw new Error(`the UDP listener at ${to} exited before it was ready`);
      }
      for (let i = 0; i < 100 && !/ready\n\S/.test(out); i++) {
        inNetns(podNetns, 'bash', ['-c', `echo hi > /dev/udp/${to}/${port}`]);
        await new Promise((r) => setTimeout(r, 100));
      }
      return out.replace('ready\n', '');
    } finally {
      server.kill();
    }
  }

  it('a pod reaches a non-masqueraded network with its own address, anything else as the node', async () => {
    const netns = d.makePodNetns('masq');
    const pod = await rt.Attach({ sandbox_id: 'masq', netns_path: netns });
    const ip = pod.interfaces[0].addresses[0].address;
    assert.equal(await sourceSeenAt(netns, '192.0.2.10'), ip);
    assert.equal(await sourceSeenAt(netns, '198.51.100.10'), '198.51.100.1');
    // The table: one rule per family; the pod range, multicast, broadcast and each network in the keep set.
    const table = masqueradeTable(d.nodeNetns)!;
    assert.deepEqual(table.sets.pods4, ['10.72.0.0/24']);
    assert.deepEqual([...table.sets.keep4].sort(), ['10.72.0.0/24', '192.0.2.0/24', '203.0.113.7', '224.0.0.0/4', '255.255.255.255']);
    assert.equal(table.rules.length, 2, table.rules.join('\n'));
    // Reconcile reads the table as written: no drift.
    assert.deepEqual((await rt.Reconcile({})).findings, []);
    // The one place an operator looks says so.
    const node = (await rt.GetNode({})).networks[0];
    assert.deepEqual([node.masquerade, node.non_masquerade_cidrs], [true, ['192.0.2.0/24', '203.0.113.7/32']]);
    const shown = knictl('--socket', d.socket, 'node');
    assert.match(shown.stdout, /masquerade \(\S+\): on, but to the cluster's pod CIDRs and 192\.0\.2\.0\/24, 203\.0\.113\.7\/32\n/, shown.stdout + shown.stderr);
    await rt.Detach({ sandbox_id: 'masq' });
  });

  it('the setting is checked: CIDRs only, no /0 (that is masquerade: false), at most 64', () => {
    assert.deepEqual(parseConfig({ nonMasqueradeCIDRs: ['10.1.2.3/16', 'FD00::1/48'] }).nonMasqueradeCIDRs.map((c) => c.text), ['10.1.0.0/16', 'fd00::/48']);
    assert.throws(() => parseConfig({ nonMasqueradeCIDRs: ['0.0.0.0/0', 'x', '10.0.0.0/33'] }, 'f'), (e: Error) =>
      e instanceof ConfigError && /0\.0\.0\.0\/0 would leave every destination unmasqueraded: set masquerade: false/.test(e.message) && /not a CIDR.*"x"/.test(e.message) && /prefix length 33/.test(e.message));
    assert.throws(() => parseConfig({ nonMasqueradeCIDRs: '10.0.0.0/8' }), /nonMasqueradeCIDRs must list at most 64 CIDRs/);
  });
});

describe('masquerade leaves multicast and broadcast alone (real kernel, bridge with br_netfilter)', () => {
  let d: TestDaemon;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.74.0.0/24'], podLink: 'bridge' });
  });
  after(() => d?.cleanup());

  /** The source address pod b hears a datagram from pod a with, sent to `to` (b joins it if it is a group). */
  async function heardFrom(a: string, b: string, to: string, group: boolean): Promise<string> {
    const port = 9000 + Math.floor(Math.random() * 1000);
    const join = group ? `s.addMembership('${to}');` : '';
    const listener = spawn('nsenter', [`--net=${b}`, process.execPath, '-e', `const s=require('dgram').createSocket({type:'udp4',reuseAddr:true});s.on('message',(m,r)=>{process.stdout.write(r.address);process.exit(0)});s.bind(${port},()=>{${join}process.stdout.write('ready\\n')});setTimeout(()=>process.exit(1),30000)`], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    listener.stdout.on('data', (c) => (out += c));
    try {
      for (let i = 0; i < 100 && !/ready\n\S/.test(out); i++) {
        if (out.includes('ready')) inNetns(a, process.execPath, ['-e', `const s=require('dgram').createSocket('udp4');s.bind(()=>{s.setBroadcast(true);s.send('hi',${port},'${to}',()=>s.close())})`]);
        await new Promise((r) => setTimeout(r, 100));
      }
      return out.replace('ready\n', '');
    } finally {
      listener.kill();
    }
  }

  // br_netfilter hands bridged frames to the postrouting hook: without the keep set's multicast and broadcast the
  // pods beside the sender heard the gateway's address.
  it("a pod's multicast and limited broadcast reach the pods of its bridge from the pod's own address", async () => {
    const rt = d.rt();
    const [a, b] = [d.makePodNetns('mca'), d.makePodNetns('mcb')];
    const ipA = (await rt.Attach({ sandbox_id: 'mca', netns_path: a })).interfaces[0].addresses[0].address;
    await rt.Attach({ sandbox_id: 'mcb', netns_path: b });
    assert.equal(await heardFrom(a, b, '239.1.2.3', true), ipA);
    assert.equal(await heardFrom(a, b, '255.255.255.255', false), ipA);
    await rt.Detach({ sandbox_id: 'mca' });
    await rt.Detach({ sandbox_id: 'mcb' });
  });
});

describe('the masquerade table follows the peers by element (real kernel, nftables)', () => {
  const ns = `${RUN}-masqset`;
  before(() => sh('ip', ['netns', 'add', ns]));
  after(() => trySh('ip', ['netns', 'del', ns]));

  /** The i-th of 5,000 peers' blocks, every other /24 of 10.0.0.0/8: none side by side, nothing merges. */
  const peer = (i: number) => `10.${(i * 2) >> 8}.${(i * 2) & 255}.0/24`;
  const peers = (n: number, skip = -1) => Array.from({ length: n }, (_, i) => i).filter((i) => i !== skip).map(peer);

  it('5,000 peers: one rule per family, one element per peer; a peer leaving or coming is one element deleted or added; a new prefix length, a set and a lookup more; reconcile reads each step as written', () => {
    const ranges = ['10.254.0.0/24', 'fd00:254::/64'];
    const lists = [peers(5000), peers(5000, 1234), peers(5000), [...peers(5000), '10.0.1.0/24'], [...peers(5000), '10.0.1.0/26', 'fd00:1::/64'], peers(5000)];
    const run = spawnSync('ip', ['netns', 'exec', ns, process.execPath, path.join(packageRoot(), 'dist/test/helpers/masquerade-in-netns.js')], { input: JSON.stringify({ ranges, lists }), encoding: 'utf8' });
    assert.equal(run.status, 0, `${run.error ?? ''} ${run.stderr}`);
    // No drift after any step: the elements are what kni computed.
    assert.deepEqual(run.stdout.trim().split('\n').filter((l) => !l.startsWith('{')), ['[]', '[]', '[]', '[]', '[]', '[]']);
    const table = masqueradeTable(ns)!;
    // The /26 came with a set and a lookup of its own (the table written whole); gone, it left its set empty.
    assert.deepEqual(table.rules, [
      `ip saddr @pods4 ip daddr != @keep4 ip daddr & 255.255.255.0 != @peers4_24 ip daddr & 255.255.255.192 != @peers4_26 masquerade comment "${COMMENT}"`,
      `ip6 saddr @pods6 ip6 daddr != @keep6 ip6 daddr & ffff:ffff:ffff:ffff:: != @peers6_64 masquerade comment "${COMMENT}"`,
    ]);
    // Multicast, broadcast, this node's range in the interval set; the peers' blocks by address.
    assert.deepEqual(table.sets.keep4.sort(), ['10.254.0.0/24', '224.0.0.0/4', '255.255.255.255']);
    assert.deepEqual(table.sets.keep6.sort(), ['fd00:254::/64', 'ff00::/8']);
    assert.equal(table.sets.peers4_24.length, 5000);
    assert.ok(table.sets.peers4_24.includes('10.9.196.0'), table.sets.peers4_24.slice(0, 5).join(' '));
    assert.deepEqual([table.sets.peers4_26, table.sets.peers6_64], [[], []]);
  });

  it("reconcile finds an element slipped into a peers' set, one deleted, and a rule that no longer looks a set up", () => {
    const ranges = ['10.254.0.0/24'];
    const tamper = ['add element inet kni-masquerade peers4_26 { 10.7.0.64 }', `delete element inet kni-masquerade peers4_24 { ${peer(3).replace('/24', '')} }`,
      'flush chain inet kni-masquerade postrouting', `add rule inet kni-masquerade postrouting ip saddr @pods4 ip daddr != @keep4 masquerade comment "${COMMENT}"`,
      `add rule inet kni-masquerade postrouting ip6 saddr @pods6 ip6 daddr != @keep6 masquerade comment "${COMMENT}"`, ''].join('\n');
    const run = spawnSync('ip', ['netns', 'exec', ns, process.execPath, path.join(packageRoot(), 'dist/test/helpers/masquerade-in-netns.js')], { input: JSON.stringify({ ranges, lists: [[...peers(10), '10.7.0.0/26'], peers(10)], tamper }), encoding: 'utf8' });
    assert.equal(run.status, 0, `${run.error ?? ''} ${run.stderr}`);
    assert.deepEqual(run.stdout.trim().split('\n').filter((l) => !l.startsWith('{')).map((l) => JSON.parse(l)), [[], [], [
      'the masquerade set peers4_24 was changed (9 elements; kni wrote 10)',
      'no masquerade rule looks up the set peers4_24',
      'the masquerade set peers4_26 holds 1 elements kni did not write',
    ]]);
  });

  it('a change is its blocks\' elements, deleted before added; peers inside a pool or a nonMasqueradeCIDR are not elements', () => {
    const cfg = (o: { pool?: string[]; nonMasq?: string[] } = {}) => ({ ranges: [parseCidr('10.254.0.0/24')], nonMasqueradeCIDRs: (o.nonMasq ?? []).map(parseCidr), nodeIpam: { clusterCIDRs: (o.pool ?? []).map(parseCidr) } as any });
    const keep = (l: string[], o = {}) => keepSets(cfg(o), l.map(parseCidr));
    const delta = (added: string[], removed: string[], o = {}) => keepSetDelta(cfg(o), added.map(parseCidr), removed.map(parseCidr));
    const addr = (i: number) => peer(i).replace('/24', '');
    assert.equal(delta([], [peer(1234)]), `delete element inet kni-masquerade peers4_24 { ${addr(1234)} }\n`);
    assert.equal(delta([peer(1234), 'fd00:1::/64', '10.1.0.0/16'], []), `add element inet kni-masquerade peers4_24 { ${addr(1234)} }\nadd element inet kni-masquerade peers6_64 { fd00:1:: }\nadd element inet kni-masquerade peers4_16 { 10.1.0.0 }\n`);
    // A block that changed hands: deleted and added in one transaction.
    assert.equal(delta([peer(7)], [peer(7)]), `delete element inet kni-masquerade peers4_24 { ${addr(7)} }\nadd element inet kni-masquerade peers4_24 { ${addr(7)} }\n`);
    assert.equal(delta([], []), '');
    // Inside the pool or a nonMasqueradeCIDR: no element; partly over one: an element all the same.
    assert.equal(delta(['10.0.3.0/24', '192.0.2.0/24'], [], { pool: ['10.0.0.0/16'], nonMasq: ['192.0.0.0/8'] }), '');
    assert.equal(delta(['10.0.0.0/24'], [], { nonMasq: ['10.0.0.0/25'] }), 'add element inet kni-masquerade peers4_24 { 10.0.0.0 }\n');
    const k = keep(['10.0.0.0/24', '10.9.0.0/24', '10.9.0.0/24', 'fd00:1::/64', '10.8.0.0/26'], { pool: ['10.0.0.0/16'] });
    assert.deepEqual(k.fixed, { 4: ['10.0.0.0/16', '10.254.0.0/24', '224.0.0.0/4', '255.255.255.255/32'], 6: ['ff00::/8'] });
    assert.deepEqual([[...k.blocks[4]], [...k.blocks[6]]], [[[24, ['10.9.0.0']], [26, ['10.8.0.0']]], [[64, ['fd00:1::']]]]);
  });

  it("an earlier kni's iptables chain KNI-MASQ is removed at node setup", async () => {
    const d = await TestDaemon.start({ ranges: ['10.73.0.0/24'] }, {
      beforeLaunch: (node) => {
        sh('ip', ['netns', 'exec', node, 'iptables', '-t', 'nat', '-N', 'KNI-MASQ']);
        sh('ip', ['netns', 'exec', node, 'iptables', '-t', 'nat', '-A', 'KNI-MASQ', '-j', 'MASQUERADE']);
        sh('ip', ['netns', 'exec', node, 'iptables', '-t', 'nat', '-A', 'POSTROUTING', '-s', '10.73.0.0/24', '-m', 'comment', '--comment', "kni: masquerade traffic leaving the cluster's pods", '-j', 'KNI-MASQ']);
      },
    });
    try {
      assert.doesNotMatch(inNetns(d.nodeNetns, 'iptables', ['-t', 'nat', '-S']).out, /KNI-MASQ/);
      assert.equal(masqueradeTable(d.nodeNetns)!.rules.length, 2);
    } finally {
      d.cleanup();
    }
  });
});
