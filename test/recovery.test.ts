// Nothing leaks: crashes at random points, the seed traps (late DEL, crashlooping sandboxes),
// the kernel drifting behind kni's back, and load.
import * as grpc from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { masqueradeTable } from './helpers/masquerade-table';
import { inNetns, ping, sh } from './helpers/sh';
import { damageStateRecord, stateRecords } from './helpers/state-records';
import { inParallel } from './helpers/pool';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

const addrsOf = (p: any): string[] => p.interfaces[0].addresses.map((a: any) => a.address);

/**
 * The 30 rounds measured on this machine kind: ~40 s idle, 116 s at load 9 on 2 cores (eight
 * CPU-bound loops beside the suite); the limit leaves a margin of 2.4 on the busy run.
 */
const LIMIT_MS = 280_000;

describe('crash anywhere', () => {
  let d: TestDaemon;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.61.0.0/22', 'fd00:61::/64'], unclaimedNetnsGraceSeconds: 1 });
  });
  after(() => d?.cleanup());

  // Bound by work: ROUNDS rounds, ~40 live pods at a round's start (each start reconciles them
  // all); each round is a daemon start, which is what a busy machine slows most.
  const ROUNDS = 30;
  it(`${ROUNDS} rounds of kill -9 during concurrent attach/detach: kills land mid-attach; after restart and one GC nothing leaks and every live pod keeps its addresses`, async function () {
    this.timeout(LIMIT_MS);
    const live = new Map<string, { addrs: string[]; netns: string }>();
    let seq = 0;
    let answered = 0;
    let rolledBack = 0;
    let midAttachKills = 0;
    const uncommittedAttach = () => [...stateRecords(d.stateDir, 'sandboxes').values()].some((r) => r.phase === 'attaching');
    const unexpected: string[] = [];
    // Only what a kill can cause: the connection is gone (UNAVAILABLE / CANCELLED, or grpc-js's
    // INTERNAL for a stream reset by the dying server).
    const expectKillError = (e: grpc.ServiceError) => {
      if (e.code === grpc.status.UNAVAILABLE || e.code === grpc.status.CANCELLED) return;
      if (e.code === grpc.status.INTERNAL && /RST_STREAM|Connection dropped|connection closed/i.test(e.details)) return;
      unexpected.push(`${grpc.status[e.code]}: ${e.details}`);
    };
    const seed = Number(process.env.KNI_TEST_SEED ?? Date.now() % 2 ** 31);
    let state = seed;
    const rand = () => ((state = (state * 1103515245 + 12345) >>> 0) / 2 ** 32);
    for (let round = 0; round < ROUNDS; round++) {
      const kni = d.kni();
      const rt = d.rt();
      await Promise.all([kni.QueryNodeNetworks({}), rt.GetNode({})]); // connected before the clock starts
      // Four streams of CreateNetwork + Attach (one call each at a time) keep the daemon busy.
      // The kill must land inside an attach, which no timer can aim at (a daemon finishes every
      // request it has read before it writes an answer): the daemon is frozen (SIGSTOP) at
      // random moments and killed only when its state dir shows a record without its commit
      // mark, i.e. an attach between its record and its commit; else it is let go (SIGCONT).
      let killed: Promise<unknown> | undefined;
      const kill = () => (killed ??= d.stop('SIGKILL'));
      let answeredNow = 0;
      const probeAfter = 1 + Math.floor(rand() * 5); // answers this round before the probing starts
      const ops: Promise<unknown>[] = Array.from({ length: 4 }, async () => {
        while (!killed) {
          const id = `c${seq++}`;
          try {
            const n = await kni.CreateNetwork({});
            const p = await rt.Attach({ sandbox_id: id, netns_path: n.netns_path });
            answered++;
            answeredNow++;
            live.set(id, { addrs: addrsOf(p), netns: n.netns_path });
          } catch (e) {
            expectKillError(e as grpc.ServiceError);
            return;
          }
        }
      });
      // A random few detach, and the oldest beyond 40 do: a round answers ~15-30 attaches, so
      // without that the live set grows by the round until the /22 runs out (CI saw it).
      const ids = [...live.keys()];
      const detaching = new Set(ids.filter(() => rand() < 0.15).slice(0, 6));
      for (const id of ids) {
        if (ids.length - detaching.size <= 40) break;
        detaching.add(id);
      }
      for (const id of detaching) {
        live.delete(id); // whether or not the detach lands, the runtime no longer wants it
        ops.push(rt.Detach({ sandbox_id: id }).catch(expectKillError));
      }
      const pid = d.proc!.pid!;
      await waitFor(() => answeredNow >= probeAfter || unexpected.length > 0, 30_000, () => `${answeredNow} attaches answered this round`);
      for (let probe = 0; probe < 400 && !killed; probe++) {
        await new Promise((r) => setTimeout(r, Math.floor(rand() * 4)));
        process.kill(pid, 'SIGSTOP');
        if (uncommittedAttach()) {
          midAttachKills++;
          void kill();
        } else process.kill(pid, 'SIGCONT');
      }
      await kill(); // no probe found one (rare): kill anyway
      await Promise.all(ops);
      const from = d.output.length;
      await d.restart();
      rolledBack += (d.output.slice(from).match(/rolling back an attach interrupted by a restart/g) ?? []).length;
    }
    assert.deepEqual(unexpected, [], `seed ${seed}: errors a kill cannot cause`);
    assert.ok(midAttachKills >= ROUNDS / 2, `seed ${seed}: only ${midAttachKills} of ${ROUNDS} kills landed in the middle of an attach`);
    assert.ok(rolledBack >= midAttachKills, `seed ${seed}: ${midAttachKills} kills left an uncommitted attach, only ${rolledBack} were rolled back`);
    await new Promise((r) => setTimeout(r, 1100)); // past unclaimedNetnsGraceSeconds
    const rt = d.rt();
    await rt.GarbageCollect({ live_sandbox_ids: [...live.keys()] });

    const pods = (await rt.ListPods({})).pods as any[];
    assert.deepEqual(pods.map((p) => p.sandbox_id).sort(), [...live.keys()].sort(), 'the pods kni holds are not the live ones');
    for (const p of pods) assert.deepEqual(addrsOf(p), live.get(p.sandbox_id)!.addrs, `${p.sandbox_id} changed addresses`);
    const all = pods.flatMap(addrsOf);
    assert.equal(new Set(all).size, all.length, 'an address is held twice');
    const want = pods.map((p) => p.interfaces[0].host_interface);
    assert.deepEqual((await d.kniVethsSettled(want.length)).sort(), want.sort(), 'veths leaked or lost');
    assert.deepEqual(fs.readdirSync(d.netnsDir).sort(), [...live.values()].map((v) => path.basename(v.netns)).sort(), 'netns pins leaked or lost');
    const ipam = await rt.GetIPAMStatus({});
    for (const r of ipam.ranges) assert.equal(Number(r.used), live.size, `${r.cidr} used`);
    // 60 restarts, one masquerade table: one rule per family, each set's elements once.
    const masq = masqueradeTable(d.nodeNetns)!;
    assert.equal(masq.rules.length, 2, masq.rules.join('\n'));
    assert.deepEqual([masq.sets.pods4, masq.sets.pods6], [['10.61.0.0/22'], ['fd00:61::/64']]);
    // The kernel agrees with the records for a sample of the survivors.
    for (const p of pods.slice(0, 10)) {
      const out = inNetns(p.netns_path, 'ip', ['-o', 'addr', 'show', 'dev', 'eth0']).out;
      for (const a of addrsOf(p)) assert.ok(out.includes(`${a}/`), `${p.sandbox_id}: ${a} missing in its netns`);
    }
    assert.ok(answered >= 50 && live.size >= 5, `seed ${seed}: ${answered} attaches answered, ${live.size} pods live: the kills came too early to test anything`);
  });
});

describe('seed traps', () => {
  let d: TestDaemon;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.62.0.0/22', 'fd00:62::/64'] });
  });
  after(() => d?.cleanup());

  it('A1 crashes, A2 of the same pod starts, the late DEL of A1 leaves A2 its network', async () => {
    const rt = d.rt();
    const pod = { name: 'web', namespace: 'shop', uid: 'u-1' };
    const n1 = d.makePodNetns('a1');
    const a1 = await rt.Attach({ sandbox_id: 'a1', netns_path: n1, pod });
    sh('ip', ['netns', 'del', path.basename(n1)]); // A1's sandbox died; no DEL yet
    const n2 = d.makePodNetns('a2');
    const a2 = await rt.Attach({ sandbox_id: 'a2', netns_path: n2, pod });
    assert.notDeepEqual(addrsOf(a2), addrsOf(a1));
    assert.equal((await rt.Detach({ sandbox_id: 'a1' })).released, true);
    assert.deepEqual(addrsOf(await rt.GetPod({ sandbox_id: 'a2' })), addrsOf(a2));
    assert.ok(d.kniVeths().includes(a2.interfaces[0].host_interface));
    assert.ok(ping(n2, '10.62.0.1'), 'A2 lost its network');
    assert.ok(ping(n2, 'fd00:62::1'), 'A2 lost IPv6');
    assert.deepEqual((await rt.Check({ sandbox_id: 'a2' })).problems, []);
    await rt.Detach({ sandbox_id: 'a2' });
  });

  it('1000 sandboxes attached 16 at once and never detached: no error, no duplicate; GC reclaims all and the range is usable again', async function () {
    this.timeout(300_000);
    const kni = d.kni();
    const rt = d.rt();
    const attachAll = (prefix: string) => inParallel(16, 1000, async (i) => {
      const n = await kni.CreateNetwork({});
      return addrsOf(await rt.Attach({ sandbox_id: `${prefix}${i}`, netns_path: n.netns_path }));
    });
    const first = await attachAll('crashloop-');
    const v4 = first.map((a) => a[0]);
    assert.equal(new Set(v4).size, 1000, 'duplicate IPv4 address');
    assert.equal(new Set(first.map((a) => a[1])).size, 1000, 'duplicate IPv6 address');
    const gc = await rt.GarbageCollect({ live_sandbox_ids: [] });
    assert.equal(gc.released_sandbox_ids.length, 1000);
    assert.equal(gc.released_netns_paths.length, 1000);
    assert.equal(Number((await rt.GetIPAMStatus({})).ranges[0].used), 0);
    assert.deepEqual(fs.readdirSync(d.netnsDir), []);
    assert.deepEqual(await d.kniVethsSettled(0), []);
    // Usable again: the same thousand fit once more, then a 16-way detach empties the node.
    const second = await attachAll('again-');
    assert.equal(new Set(second.map((a) => a[0])).size, 1000);
    await inParallel(16, 1000, (i) => rt.Detach({ sandbox_id: `again-${i}` }));
    assert.equal(Number((await rt.GetIPAMStatus({})).ranges[0].used), 0);
    assert.deepEqual(fs.readdirSync(d.netnsDir), []);
    assert.deepEqual(await d.kniVethsSettled(0), []);
  });
});

describe('kernel drift', () => {
  let d: TestDaemon;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.63.0.0/24', 'fd00:63::/64'] });
  });
  after(() => d?.cleanup());

  it('a deleted veth is wired again, a vanished netns is released, a stale kni veth is removed; reconcile reports each', async () => {
    const rt = d.rt();
    const nA = d.makePodNetns('drift-a');
    const a = await rt.Attach({ sandbox_id: 'drift-a', netns_path: nA });
    const nB = d.makePodNetns('drift-b');
    const b = await rt.Attach({ sandbox_id: 'drift-b', netns_path: nB });
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'del', a.interfaces[0].host_interface]);
    sh('ip', ['netns', 'del', path.basename(nB)]);
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'add', 'kni0123456789ab', 'type', 'veth', 'peer', 'name', 'strayp']);
    assert.match((await rt.Check({ sandbox_id: 'drift-a' })).problems.join(), /host veth .* is missing/);

    const from = d.output.length;
    const r = await rt.Reconcile({});
    assert.deepEqual(r.repaired_sandbox_ids, ['drift-a']);
    assert.deepEqual(r.released_sandbox_ids, ['drift-b']);
    assert.deepEqual(r.removed_veths, ['kni0123456789ab']);
    assert.equal(r.findings.length, 3);
    assert.match(r.findings.join('\n'), /drift-a: host veth .* is missing.*wired again/);

    assert.deepEqual((await rt.Check({ sandbox_id: 'drift-a' })).problems, []);
    assert.deepEqual(addrsOf(await rt.GetPod({ sandbox_id: 'drift-a' })), addrsOf(a));
    assert.ok(ping(nA, '10.63.0.1'), 'the repaired pod has no network');
    assert.equal(Number((await rt.GetIPAMStatus({})).ranges[0].used), 1, "drift-b's addresses are not free");
    assert.ok(!d.nodeLinks().includes('kni0123456789ab') && !d.nodeLinks().includes('strayp'));
    assert.ok(await d.linkGone(b.interfaces[0].host_interface));
    assert.deepEqual((await rt.Reconcile({})).findings, [], 'a second reconcile still finds something');
    assert.match(d.output.slice(from), /"level":"warn","msg":"reconcile: sandbox drift-b: netns .* is gone/);
    await rt.Detach({ sandbox_id: 'drift-a' });
  });

  it('a restart reconciles before serving: a veth deleted while kni was down is back', async () => {
    const rt = d.rt();
    const n = d.makePodNetns('drift-c');
    const c = await rt.Attach({ sandbox_id: 'drift-c', netns_path: n });
    await d.stop('SIGKILL');
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'del', c.interfaces[0].host_interface]);
    await d.restart();
    assert.deepEqual((await d.rt().Check({ sandbox_id: 'drift-c' })).problems, []);
    assert.ok(ping(n, '10.63.0.1'));
    await d.rt().Detach({ sandbox_id: 'drift-c' });
  });
});

describe('corrupt state', () => {
  let d: TestDaemon;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.66.0.0/24', 'fd00:66::/64'] });
  });
  after(() => d?.cleanup());

  it('truncated and garbage records: the daemon starts, says so, rebuilds from the kernel and never hands out an address in use', async () => {
    const rt = d.rt();
    const nA = d.makePodNetns('lost-a');
    const a = await rt.Attach({ sandbox_id: 'lost-a', netns_path: nA });
    const nB = (await d.kni().CreateNetwork({})).netns_path;
    const b = await rt.Attach({ sandbox_id: 'lost-b', netns_path: nB });
    const c = await rt.Attach({ sandbox_id: 'intact-c', netns_path: d.makePodNetns('intact-c') });
    await d.stop('SIGKILL');
    damageStateRecord(d.stateDir, 'sandboxes', 'lost-a');
    damageStateRecord(d.stateDir, 'sandboxes', 'lost-b');
    damageStateRecord(d.stateDir, 'netns', path.basename(nB));
    fs.appendFileSync(`${d.stateDir}/sandboxes.log`, '\u0000\u0001garbage{{{\n{"half a line');
    const from = d.output.length;
    await d.restart();

    assert.match(d.output.slice(from), /"msg":"state records unreadable: set aside; rebuilding what the kernel still has".*netns\.log: line 1 unreadable.*sandboxes\.log: lines 1, 2, 3, 4, 7 unreadable.*sandboxes\.log: a torn last line dropped/);
    assert.match(d.output.slice(from), /"msg":"sandbox record rebuilt from the kernel","sandbox":"lost-a"/);
    const rt2 = d.rt();
    for (const [id, before, netns] of [['lost-a', a, nA], ['lost-b', b, nB], ['intact-c', c, c.netns_path]] as const) {
      const now = await rt2.GetPod({ sandbox_id: id });
      assert.deepEqual(addrsOf(now), addrsOf(before), `${id} addresses`);
      assert.equal(now.netns_path, netns);
      assert.deepEqual((await rt2.Check({ sandbox_id: id })).problems, [], id);
    }
    assert.ok(fs.existsSync(`${d.stateDir}/sandboxes.log.corrupt`), 'the damaged log was not kept aside');
    const taken = new Set([a, b, c].flatMap(addrsOf));
    for (let i = 0; i < 8; i++) {
      const p = await rt2.Attach({ sandbox_id: `new-${i}`, netns_path: d.makePodNetns(`new-${i}`) });
      for (const x of addrsOf(p)) assert.ok(!taken.has(x), `${x} handed out twice`);
    }
    assert.deepEqual((await rt2.Reconcile({})).findings, []);
    // The rebuilt netns record lets GC release the kni-made pin too.
    const gc = await rt2.GarbageCollect({ live_sandbox_ids: [] });
    assert.ok(gc.released_netns_paths.includes(nB), 'the pin of lost-b was not released');
    assert.deepEqual(fs.readdirSync(d.netnsDir), []);
    assert.deepEqual(await d.kniVethsSettled(0), []);
  });
});
