// Calls that race each other on one sandbox or one netns end in a state that is whole, with no
// leak and no address handed out twice. Every call here is in flight together with the others
// (Promise.all over calls started at once, not awaited one by one).
import * as grpc from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { Client } from '../plugin/client/clients';
import { inParallel } from './helpers/pool';
import fs from 'node:fs';
import { existsError, HostVethExistsError, PodInterfaceExistsError } from '../plugin/pod/pod-wiring';
import { netlinkIn } from './helpers/netlink-in';
import { inNetns, RUN, sh, trySh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

const S = grpc.status;
type Outcome = { ok: true; value: any } | { ok: false; code: number; details: string };
const settle = (p: Promise<any>): Promise<Outcome> =>
  p.then((value) => ({ ok: true as const, value }), (e: grpc.ServiceError) => ({ ok: false as const, code: e.code, details: e.details }));

describe('races', () => {
  let d: TestDaemon;
  let rt: Client;
  let kni: Client;

  before(async () => {
    d = await TestDaemon.start();
    rt = d.rt();
    kni = d.kni();
  });
  after(() => d?.cleanup());

  /** Nothing left: no pod, no address, no kni veth. */
  async function assertNothingLeft(): Promise<void> {
    assert.deepEqual((await rt.ListPods({})).pods.map((p: any) => p.sandbox_id), []);
    for (const r of (await rt.GetIPAMStatus({})).ranges) assert.equal(r.used, '0', `${r.cidr} still has addresses in use`);
    assert.deepEqual(await d.kniVethsSettled(0), []);
  }

  it('two Attach calls of one id at once into one netns: both answer the same pod', async () => {
    const netns = d.makePodNetns('twin');
    const [a, b] = await Promise.all([rt.Attach({ sandbox_id: 'twin', netns_path: netns }), rt.Attach({ sandbox_id: 'twin', netns_path: netns })]);
    assert.deepEqual(a.interfaces, b.interfaces);
    assert.equal(d.kniVeths().length, 1);
    await rt.Detach({ sandbox_id: 'twin' });
    await assertNothingLeft();
  });

  it('two Attach calls of one id at once into two netns: one wins, the other gets ALREADY_EXISTS', async () => {
    const [n1, n2] = [d.makePodNetns('split1'), d.makePodNetns('split2')];
    const out = await Promise.all([settle(rt.Attach({ sandbox_id: 'split', netns_path: n1 })), settle(rt.Attach({ sandbox_id: 'split', netns_path: n2 }))]);
    const won = out.filter((o) => o.ok);
    const lost = out.filter((o): o is Extract<Outcome, { ok: false }> => !o.ok);
    assert.equal(won.length, 1);
    assert.equal(lost.length, 1);
    assert.equal(lost[0].code, S.ALREADY_EXISTS, lost[0].details);
    const loserNetns = out[0].ok ? n2 : n1;
    assert.doesNotMatch(inNetns(loserNetns, 'ip', ['-o', 'link']).out, /eth0/);
    await rt.Detach({ sandbox_id: 'split' });
    await assertNothingLeft();
  });

  it('two ids into one netns at once: one gets eth0, the other ALREADY_EXISTS and keeps no address', async () => {
    const netns = d.makePodNetns('shared');
    const out = await Promise.all([settle(rt.Attach({ sandbox_id: 'sh-a', netns_path: netns })), settle(rt.Attach({ sandbox_id: 'sh-b', netns_path: netns }))]);
    assert.equal(out.filter((o) => o.ok).length, 1);
    const lost = out.find((o): o is Extract<Outcome, { ok: false }> => !o.ok)!;
    assert.equal(lost.code, S.ALREADY_EXISTS, lost.details);
    assert.equal((await rt.GetIPAMStatus({})).ranges[0].used, '1');
    await Promise.all([rt.Detach({ sandbox_id: 'sh-a' }), rt.Detach({ sandbox_id: 'sh-b' })]);
    await assertNothingLeft();
  });

  it('Attach racing Detach of one id, 50 times: each round ends whole, either attached or gone', async () => {
    const netns = d.makePodNetns('flip');
    for (let i = 0; i < 50; i++) {
      const order = i % 2 ? [settle(rt.Detach({ sandbox_id: 'flip' })), settle(rt.Attach({ sandbox_id: 'flip', netns_path: netns }))] : [settle(rt.Attach({ sandbox_id: 'flip', netns_path: netns })), settle(rt.Detach({ sandbox_id: 'flip' }))];
      const out = await Promise.all(order);
      for (const o of out) assert.ok(o.ok, !o.ok ? o.details : '');
      const attached = await settle(rt.GetPod({ sandbox_id: 'flip' }));
      if (attached.ok) assert.deepEqual((await rt.Check({ sandbox_id: 'flip' })).problems, [], `round ${i}`);
      else assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/, `round ${i}: detached but eth0 is still there`);
    }
    await rt.Detach({ sandbox_id: 'flip' });
    await assertNothingLeft();
  });

  it('1200 attach and detach calls of one id, interleaved 16 at a time: no error, no leak', async function () {
    this.timeout(300_000);
    const netns = d.makePodNetns('churn1');
    const failures: string[] = [];
    await inParallel(16, 1200, async (i) => {
      const o = await settle(i % 2 ? rt.Detach({ sandbox_id: 'one' }) : rt.Attach({ sandbox_id: 'one', netns_path: netns }));
      if (!o.ok) failures.push(o.details);
    });
    assert.deepEqual(failures, []);
    await rt.Detach({ sandbox_id: 'one' });
    await assertNothingLeft();
  });

  it("the state that race leaves, made on purpose: the veth create met a name that is gone by the look (a detach's retired host end, reaped meanwhile) — a stale host end to wire again, not the pod's interface", () => {
    // Under load the reaper deleted the retired veth between the create's EEXIST and the look,
    // and the attach failed with "the pod netns already has an interface named eth0".
    const node = `${RUN}-exn`;
    const pod = `${RUN}-exp`;
    sh('ip', ['netns', 'add', node]);
    sh('ip', ['netns', 'add', pod]);
    const host = netlinkIn(`/run/netns/${node}`);
    const fd = fs.openSync(`/run/netns/${pod}`, 'r');
    try {
      const itf = { hostVeth: `${RUN}ex`, name: 'eth0' };
      assert.ok(existsError(host, fd, itf) instanceof HostVethExistsError, 'neither name there: not the pod\'s interface');
      sh('ip', ['-n', pod, 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0p']);
      assert.ok(existsError(host, fd, itf) instanceof PodInterfaceExistsError, "the pod's eth0 there");
      sh('ip', ['-n', node, 'link', 'add', itf.hostVeth, 'type', 'veth', 'peer', 'name', `${itf.hostVeth}p`]);
      assert.ok(existsError(host, fd, itf) instanceof HostVethExistsError, 'a stale host end there');
    } finally {
      host.close();
      fs.closeSync(fd);
      trySh('ip', ['netns', 'del', node]);
      trySh('ip', ['netns', 'del', pod]);
    }
  });

  it('DeleteNetwork racing AttachInterface in a kni-made netns, 30 times: no leak', async function () {
    this.timeout(120_000);
    for (let i = 0; i < 30; i++) {
      const { netns_path } = await kni.CreateNetwork({ name: `dn${i}`, namespace: 'race' });
      const out = await Promise.all([
        settle(kni.AttachInterface({ id: `dn${i}`, name: `dn${i}`, namespace: 'race', isolation: { path: netns_path } })),
        settle(kni.DeleteNetwork({ id: `dn${i}`, netns_path })),
      ]);
      assert.ok(out[1].ok, !out[1].ok ? out[1].details : '');
      // An attach that lost the race fails on a missing netns; one that won was released by the delete, or is released now.
      if (!out[0].ok) assert.match(out[0].details, /does not exist|not a network namespace/);
      await kni.DeleteNetwork({ id: `dn${i}`, netns_path });
    }
    await assertNothingLeft();
  });

  it('GarbageCollect([]) and Reconcile while 16 attaches run: no duplicate address, and a final GC leaves nothing', async function () {
    this.timeout(120_000);
    const seen = new Map<string, string>();
    const dupes: string[] = [];
    let background = true;
    const sweeper = (async () => {
      while (background) {
        await Promise.all([rt.GarbageCollect({ live_sandbox_ids: [] }), rt.Reconcile({})]);
      }
    })();
    try {
      await inParallel(16, 200, async (i) => {
        const { netns_path } = await kni.CreateNetwork({ name: `gc${i}`, namespace: 'race' });
        const o = await settle(rt.Attach({ sandbox_id: `gc${i}`, netns_path }));
        if (!o.ok) return; // a GC may release the netns before the attach: that is its right
        for (const a of o.value.interfaces[0].addresses) {
          const holder = seen.get(a.address);
          // An address may come back once its first holder was released by a GC.
          if (holder && (await settle(rt.GetPod({ sandbox_id: holder }))).ok) dupes.push(`${a.address}: ${holder} and gc${i}`);
          seen.set(a.address, `gc${i}`);
        }
      });
    } finally {
      background = false;
      await sweeper;
    }
    assert.deepEqual(dupes, []);
    const live = (await rt.ListPods({})).pods;
    const addrs = live.flatMap((p: any) => p.interfaces[0].addresses.map((a: any) => a.address));
    assert.equal(new Set(addrs).size, addrs.length, 'two live pods share an address');
    await rt.GarbageCollect({ live_sandbox_ids: [] });
    await assertNothingLeft();
  });

  it('kill -9 during start-up, five times, with 40 pods: the next start keeps every pod', async function () {
    this.timeout(180_000);
    const ids = Array.from({ length: 40 }, (_, i) => `boot${i}`);
    const before = new Map<string, string>();
    await inParallel(8, ids.length, async (i) => {
      const p = await rt.Attach({ sandbox_id: ids[i], netns_path: d.makePodNetns(ids[i]) });
      before.set(ids[i], p.interfaces[0].addresses[0].address);
    });
    for (let k = 0; k < 5; k++) {
      await d.stop('SIGKILL');
      d.closeClients();
      const from = d.output.length;
      void d.launch().catch(() => undefined);
      // Killed once it has begun starting (it logged), before or while it reconciles.
      for (let w = 0; w < 200 && d.output.length === from; w++) await new Promise((r) => setTimeout(r, 5));
      await d.stop('SIGKILL');
    }
    d.closeClients();
    await d.launch();
    rt = d.rt();
    kni = d.kni();
    const after = new Map((await rt.ListPods({})).pods.map((p: any) => [p.sandbox_id, p.interfaces[0].addresses[0].address] as [string, string]));
    assert.deepEqual(after, before);
    for (const id of ids) assert.deepEqual((await rt.Check({ sandbox_id: id })).problems, [], id);
    await inParallel(8, ids.length, async (i) => void (await rt.Detach({ sandbox_id: ids[i] })));
    await assertNothingLeft();
  });
});
