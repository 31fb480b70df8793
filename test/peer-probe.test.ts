// kni's probe of other nodes' pod networks (plugin/node/peer-probe.ts), on loopback: a kni
// listening answers, an address nobody listens on resets (the path works), the results kept per
// destination, dropped with it, and the log says when one stops answering. In a netns whose
// loopback loses large packets: small-only, and the listener's segments cut to its pods' MTU.
// Through real routes, and a vxlan port blocked between two nodes: cluster/node-agent.cluster.ts.
import assert from 'node:assert/strict';
import { ChildProcess, spawn } from 'node:child_process';
import net from 'node:net';
import type { NetworkRuntime } from '../plugin/core/network-runtime';
import { answerPeerProbe } from '../plugin/kube/peer-probe-answers';
import { askDelivery, parseDeliveryAnswer } from '../plugin/node/peer-delivery';
import type { PeerRouteStatus } from '../plugin/node/peer-routes';
import { parseCidr } from '../plugin/ipam/ip';
import { PeerProbe, PROBE_BYTES, probeAnswer, ProbeChange, ProbeState, ProbeTarget, probeTargets } from '../plugin/node/peer-probe';
import { RUN, sh, trySh } from './helpers/sh';

describe('peer probe (loopback)', () => {
  const port = 20000 + (process.pid % 20000);
  let probe: PeerProbe | undefined;
  afterEach(() => probe?.stop());

  it('answers where a kni listens, refused where none does; a target no longer probed loses its result', async () => {
    probe = new PeerProbe(() => ({ port, intervalSeconds: 30, timeoutSeconds: 2 }), 'kni test\n');
    probe.listen(['127.0.0.1']);
    await new Promise((r) => setTimeout(r, 100));
    await probe.probeAll([
      { destination: '10.0.1.0/24', address: '127.0.0.1', source: '127.0.0.1' },
      { destination: '10.0.2.0/24', address: '127.0.0.2', source: '127.0.0.1' },
    ]);
    const a = probe.result('10.0.1.0/24')!;
    assert.equal(a.state, 'answers');
    assert.ok(a.ms >= 0 && a.ms < 2000, String(a.ms));
    assert.ok(Date.parse(a.since) <= Date.now());
    assert.deepEqual([probe.result('10.0.2.0/24')?.state, probe.result('10.0.2.0/24')?.detail], ['refused', '']);
    // The same outcome again keeps its "since".
    await probe.probeAll([{ destination: '10.0.1.0/24', address: '127.0.0.1', source: '127.0.0.1' }]);
    assert.equal(probe.result('10.0.1.0/24')!.since, a.since);
    assert.equal(probe.result('10.0.2.0/24'), undefined);
  });

  it('listening on an address the node does not have is retried, not fatal; port 0 probes nothing', async () => {
    probe = new PeerProbe(() => ({ port: 0, intervalSeconds: 30, timeoutSeconds: 2 }), '');
    let asked = 0;
    probe.start(() => ['127.0.0.1'], () => (asked++, []));
    assert.equal(asked, 0, 'port 0: no round');
    probe.listen(['192.0.2.77']);
    await new Promise((r) => setTimeout(r, 100));
    probe.listen(['192.0.2.77']);
  });

  it('a kni before the byte count (its greeting alone) answers; the answer is the greeting line with the count, padded to it', async () => {
    const old = net.createServer((s) => s.end('kni old\n')).listen({ host: '127.0.0.1', port: port + 1 });
    try {
      await new Promise((r) => old.once('listening', r));
      probe = new PeerProbe(() => ({ port: port + 1, intervalSeconds: 30, timeoutSeconds: 2 }), 'kni test');
      await probe.probeAll([{ destination: '10.0.1.0/24', address: '127.0.0.1', source: '127.0.0.1' }]);
      assert.equal(probe.result('10.0.1.0/24')!.state, 'answers');
    } finally {
      old.close();
    }
    const answer = probeAnswer('kni node-a');
    assert.equal(answer.length, PROBE_BYTES);
    assert.match(answer.toString('latin1', 0, 40), /^kni node-a bytes=9216\n\.\.\./);
  });

  it('a round ends within its interval however many peers stay silent, and the next goes on with the targets it did not reach', async () => {
    const held: net.Socket[] = [];
    const mute = net.createServer((s) => held.push(s)).listen({ host: '127.0.0.1', port: port + 3 });
    try {
      await new Promise((r) => mute.once('listening', r));
      // 100 peers that take the whole 1 s timeout each, 32 at a time: 4 s for all, more than the 2 s interval.
      probe = new PeerProbe(() => ({ port: port + 3, intervalSeconds: 2, timeoutSeconds: 1 }), 'kni test');
      const targets = Array.from({ length: 100 }, (_, i) => ({ destination: `10.7.${i}.0/24`, address: '127.0.0.1', source: '127.0.0.1' }));
      const rounds: { ms: number; probed: number }[] = [];
      for (let r = 0; r < 2; r++) {
        const before = held.length;
        const t0 = performance.now();
        await probe.probeAll(targets);
        rounds.push({ ms: performance.now() - t0, probed: held.length - before });
        for (const h of held) h.destroy();
      }
      for (const r of rounds) assert.ok(r.ms < 2900, `a round took ${Math.round(r.ms)} ms for a 2 s interval`);
      assert.ok(rounds[0].probed < 100, `the first round probed all ${rounds[0].probed}: the bound was not reached`);
      assert.ok(rounds[0].probed + rounds[1].probed >= 100, `two rounds reached ${rounds[0].probed} + ${rounds[1].probed} of 100`);
    } finally {
      for (const h of held) h.destroy();
      mute.close();
    }
  });

  it("the targets are each installed route's gateway from this node's own of its family, made while the event loop turns (5,000 dual-stack peers)", async () => {
    const routes: PeerRouteStatus[] = [];
    for (let i = 0; i < 5000; i++) {
      const node = `${RUN}-peer${i}`;
      const state = i % 10 === 9 ? 'failed' : 'installed';
      routes.push({ node, destination: `10.${i >> 8}.${i & 255}.0/24`, backend: 'vxlan', via: '', device: '', state, error: '' });
      routes.push({ node, destination: `fd00:${i.toString(16)}::/64`, backend: 'vxlan', via: '', device: '', state: 'installed', error: '' });
    }
    const ranges = [parseCidr('10.255.0.0/24'), parseCidr('fd00:ffff::/64')];
    let turned = 0;
    const ticker = setInterval(() => turned++, 0);
    const started = performance.now();
    let targets: ProbeTarget[];
    try {
      targets = await probeTargets(routes, ranges);
    } finally {
      clearInterval(ticker);
    }
    // A pass longer than a few slices let timers run in it (on a fast machine it may be one slice).
    if (performance.now() - started > 50) assert.ok(turned > 0, 'no timer ran during the pass');
    assert.equal(targets.length, 9500);
    assert.deepEqual(targets[0], { destination: '10.0.0.0/24', address: '10.0.0.1', source: '10.255.0.1' });
    assert.deepEqual(targets[1], { destination: 'fd00:0::/64', address: 'fd00::1', source: 'fd00:ffff::1' });
    assert.ok(!targets.some((t) => t.destination === '10.0.9.0/24'), 'a failed route is no target');
    // Made again from the same routes: the same targets.
    assert.deepEqual(await probeTargets(routes, ranges), targets);
  });

  it('connected, and the kni there sends nothing in time (busy, stuck): no verdict, the last one kept — not an MTU black hole', async () => {
    const held: net.Socket[] = [];
    let mute = false;
    const peer = net.createServer((s) => (mute ? held.push(s) : s.end('kni peer\n'))).listen({ host: '127.0.0.1', port: port + 2 });
    try {
      await new Promise((r) => peer.once('listening', r));
      probe = new PeerProbe(() => ({ port: port + 2, intervalSeconds: 30, timeoutSeconds: 1 }), 'kni test');
      const target = { destination: '10.0.1.0/24', address: '127.0.0.1', source: '127.0.0.1' };
      await probe.probeAll([target]);
      const before = probe.result('10.0.1.0/24')!;
      assert.equal(before.state, 'answers');
      mute = true;
      await probe.probeAll([target]);
      assert.equal(held.length, 1, 'the probe did not connect');
      assert.deepEqual(probe.result('10.0.1.0/24'), before);
    } finally {
      held.forEach((s) => s.destroy());
      peer.close();
    }
  });
});

describe("a probe round's changes as the Node's Events (peer-probe-answers.ts)", () => {
  const routes: PeerRouteStatus[] = Array.from({ length: 12 }, (_, i) => ({ node: `n${i}`, destination: `10.244.${i}.0/24`, backend: 'vxlan', via: '', device: 'kni.vxlan', state: 'installed', error: '' }));
  const change = (i: number, state: ProbeState): ProbeChange => ({
    target: { destination: routes[i].destination, address: `10.244.${i}.1`, source: '10.244.99.1' },
    now: { state, detail: state === 'silent' ? `no answer from 10.244.${i}.1 port 9275 within 1 s` : '', since: '', ms: 1 },
  });
  const told = (changes: ProbeChange[]): string[] => {
    const probe = new PeerProbe(() => ({ port: 0, intervalSeconds: 30, timeoutSeconds: 1 }), 'kni test');
    const events: string[] = [];
    answerPeerProbe(probe, {} as NetworkRuntime, () => routes, (reason, message) => events.push(`${reason}: ${message}`));
    probe.onChanges!(changes);
    return events;
  };

  it('up to three of a kind one by one; more in one Event naming five and counting the rest; each kind apart', () => {
    assert.deepEqual(told([0, 1, 2].map((i) => change(i, 'silent'))).map((e) => e.replace(/ through .*/, '')), [0, 1, 2].map((i) => `PeerPodNetworkSilent: kni's probe of node n${i}'s pod network (10.244.${i}.0/24)`));
    assert.deepEqual(told([0, 1, 2, 3].map((i) => change(i, 'silent'))), [
      "PeerPodNetworkSilent: kni's probe of 4 peers' pod networks (node n0 (10.244.0.0/24), node n1 (10.244.1.0/24), node n2 (10.244.2.0/24), node n3 (10.244.3.0/24)) through kni's routes gets no answer: what is between the nodes drops pods' packets, or those nodes are down (knictl trace to a pod there)",
    ]);
    const many = told([...Array.from({ length: 9 }, (_, i) => change(i, 'silent')), change(9, 'answers'), change(10, 'refused')]);
    assert.equal(many.length, 3, many.join('\n'));
    assert.match(many[0], /^PeerPodNetworkSilent: kni's probe of 9 peers' pod networks \(node n0 \(10\.244\.0\.0\/24\), .*node n4 \(10\.244\.4\.0\/24\), and 4 more: knictl node lists them\) through kni's routes gets no answer/);
    assert.deepEqual(many.slice(1), ["PeerPodNetworkAnswers: kni's probe of node n9's pod network (10.244.9.0/24) answers again", "PeerPodNetworkAnswers: kni's probe of node n10's pod network (10.244.10.0/24) answers again"]);
  });

  it('counts and names Nodes, not routes: a dual-stack Node is one peer; a Node deleted during the round is not named', () => {
    const dual: PeerRouteStatus[] = routes.flatMap((r, i) => [r, { ...r, destination: `fd00:10:244:${i}::/64` }]);
    const v6 = (i: number): ProbeChange => ({ ...change(i, 'silent'), target: { destination: `fd00:10:244:${i}::/64`, address: `fd00:10:244:${i}::1`, source: 'fd00:10:244:99::1' } });
    const tell = (changes: ProbeChange[], now: PeerRouteStatus[]): string[] => {
      const probe = new PeerProbe(() => ({ port: 0, intervalSeconds: 30, timeoutSeconds: 1 }), 'kni test');
      const events: string[] = [];
      answerPeerProbe(probe, {} as NetworkRuntime, () => now, (reason, message) => events.push(`${reason}: ${message}`));
      probe.onChanges!(changes);
      return events;
    };
    const both = [0, 1, 2, 3].flatMap((i) => [change(i, 'silent'), v6(i)]);
    const [one] = tell(both, dual);
    assert.match(one, /^PeerPodNetworkSilent: kni's probe of 4 peers' pod networks \(node n0 \(10\.244\.0\.0\/24, fd00:10:244:0::\/64\), /);
    // n3 was deleted while the round ran: three Nodes left, told one by one.
    const left = tell(both, dual.filter((r) => r.node !== 'n3'));
    assert.deepEqual(left.map((e) => e.replace(/ through .*/, '')), [0, 1, 2].map((i) => `PeerPodNetworkSilent: kni's probe of node n${i}'s pod network (10.244.${i}.0/24, fd00:10:244:${i}::/64)`));
  });
});

describe('another node\'s kni asking how this one delivers (a trace\'s last hops, on the probe\'s port)', () => {
  const port = 20000 + ((process.pid + 3) % 20000);
  let probe: PeerProbe | undefined;
  afterEach(() => probe?.stop());

  it('answers with the hops its handler gives, the handler\'s refusal as an error; a kni before the request line still gets its probe answer', async () => {
    probe = new PeerProbe(() => ({ port, intervalSeconds: 30, timeoutSeconds: 2 }), 'kni test');
    const asked: string[] = [];
    probe.onDeliver = async (destination, from) => {
      asked.push(`${destination} from ${from}`);
      if (destination === '10.0.9.9') throw new Error('no such pod here');
      return { hops: [{ what: 'pod ns/a on this node', problem: '' }], pod: { namespace: 'ns', name: 'a' } };
    };
    probe.listen(['127.0.0.1']);
    await new Promise((r) => setTimeout(r, 100));
    const peer = { address: '127.0.0.1', source: '127.0.0.1' };
    assert.deepEqual(await askDelivery(peer, port, '10.0.1.5', 2000), { hops: [{ what: 'pod ns/a on this node', problem: '' }], pod: { namespace: 'ns', name: 'a' } });
    await assert.rejects(askDelivery(peer, port, '10.0.9.9', 2000), /^Error: its kni: no such pod here$/);
    assert.deepEqual(asked, ['10.0.1.5 from 127.0.0.1', '10.0.9.9 from 127.0.0.1']);
    // An asker before the request line sends nothing and reads: the probe's answer, a moment later.
    const got = await new Promise<string>((resolve, reject) => {
      const chunks: Buffer[] = [];
      net.connect({ host: '127.0.0.1', port }).on('data', (c: Buffer) => chunks.push(c)).on('end', () => resolve(Buffer.concat(chunks).toString('latin1'))).on('error', reject);
    });
    assert.equal(got.length, PROBE_BYTES);
    assert.match(got, /^kni test bytes=9216\n/);
    // Nobody listening, and a kni that only greets (before this): said as such.
    await assert.rejects(askDelivery(peer, port + 2, '10.0.1.5', 2000), /port \d+: ECONNREFUSED$/);
    const old = net.createServer((s) => s.end('kni old\n')).listen({ host: '127.0.0.1', port: port + 1 });
    try {
      await new Promise((r) => old.once('listening', r));
      await assert.rejects(askDelivery(peer, port + 1, '10.0.1.5', 2000), /its kni is older and does not say how it delivers/);
    } finally {
      old.close();
    }
  });

  it('an answer is checked as any input: JSON, one to 16 hops of two strings', () => {
    assert.throws(() => parseDeliveryAnswer('{"hops": []}'), /no hops/);
    assert.throws(() => parseDeliveryAnswer('{"hops": [{"what": 5, "problem": ""}]}'), /not \{what, problem\}/);
    assert.throws(() => parseDeliveryAnswer(JSON.stringify({ hops: Array(17).fill({ what: 'x', problem: '' }) })), /no hops/);
    assert.throws(() => parseDeliveryAnswer('<html>'), /not JSON/);
    // A kni that knows the question but took it for a probe (it came late) is not called older.
    assert.throws(() => parseDeliveryAnswer(`kni peer bytes=9216\n${'.'.repeat(100)}`), /took the question for a probe: it did not arrive in time/);
    assert.deepEqual(parseDeliveryAnswer(JSON.stringify({ hops: [{ what: 'x'.repeat(5000), problem: '' }], pod: { namespace: 1 } })), { hops: [{ what: 'x'.repeat(4096), problem: '' }] });
  });
});

describe('peer probe over a path that loses large packets (two netns, a veth whose far end drops them)', () => {
  const [l, p] = [`${RUN}-probel`, `${RUN}-probep`];
  const port = 20000 + ((process.pid + 7) % 20000);
  const inNs = (ns: string, cmd: string, args: string[]): string => sh('nsenter', [`--net=/run/netns/${ns}`, cmd, ...args]);
  let listener: ChildProcess | undefined;
  before(() => {
    for (const ns of [l, p]) {
      trySh('ip', ['netns', 'del', ns]);
      sh('ip', ['netns', 'add', ns]);
    }
    sh('ip', ['-n', l, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', p]);
    for (const [ns, addr] of [[l, '10.99.0.1/24'], [p, '10.99.0.2/24']]) {
      sh('ip', ['-n', ns, 'addr', 'add', addr, 'dev', 'eth0']);
      sh('ip', ['-n', ns, 'link', 'set', 'eth0', 'up']);
    }
    // Segments as a NIC sends them, counted one by one where they arrive: the stack otherwise
    // hands TCP's 64 kB GSO packets whole to the veth, and GRO joins them again.
    inNs(l, 'ethtool', ['-K', 'eth0', 'tso', 'off', 'gso', 'off']);
    inNs(p, 'ethtool', ['-K', 'eth0', 'gro', 'off']);
  });
  afterEach(() => listener?.stdin?.end());
  after(() => [l, p].forEach((ns) => trySh('ip', ['netns', 'del', ns])));

  async function listen(mtu: number): Promise<void> {
    listener?.stdin?.end();
    const child = spawn('nsenter', [`--net=/run/netns/${l}`, process.execPath, 'dist/test/helpers/probe-in-netns.js', 'listen', '10.99.0.1', String(port), String(mtu)], { stdio: ['pipe', 'pipe', 'inherit'] });
    listener = child;
    let out = '';
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (c: Buffer) => {
        out += c.toString();
        if (/^listening$/m.test(out)) resolve();
      });
      child.once('exit', (code) => reject(new Error(`the listener exited (${code}): ${out}`)));
    });
  }
  const probe = (): { state: string; detail: string } => JSON.parse(inNs(p, process.execPath, ['dist/test/helpers/probe-in-netns.js', 'probe', '10.99.0.1', '10.99.0.2', String(port), '1']).trim().split('\n').at(-1)!);
  // A path of MTU 1400 whose "too big" never comes back: what arrives larger is lost.
  const drop = (op: '-A' | '-D'): string => inNs(p, 'iptables', [op, 'INPUT', '-i', 'eth0', '-p', 'tcp', '--sport', String(port), '-m', 'length', '--length', '1401:65535', '-j', 'DROP']);

  it('small-only when the handshake passes and the full-sized answer does not; a listener whose pods\' MTU the path takes answers', async () => {
    await listen(0);
    assert.equal(probe().state, 'answers', 'the path as it is');
    drop('-A');
    try {
      const lost = probe();
      assert.equal(lost.state, 'small-only', JSON.stringify(lost));
      // The greeting line, in a small segment of its own, came; the rest did not.
      assert.match(lost.detail, /^connected to 10\.99\.0\.1 port \d+, but (\d+) of the 9216 bytes its kni sends back in full-sized packets arrived within 1 s$/);
      assert.ok(Number(/but (\d+) of/.exec(lost.detail)![1]) > 0 && Number(/but (\d+) of/.exec(lost.detail)![1]) < 100, lost.detail);
      // The node's pods have MTU 1400 there: the answer's segments are cut to it, and pass.
      await listen(1400);
      assert.equal(probe().state, 'answers');
      await listen(1500);
      assert.equal(probe().state, 'small-only');
    } finally {
      drop('-D');
    }
  });
});
