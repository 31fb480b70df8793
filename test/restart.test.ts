// The daemon goes away (SIGTERM, kill -9) and comes back: pods keep their network and records.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { ping } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

describe('restart', () => {
  let d: TestDaemon;
  before(async () => {
    d = await TestDaemon.start();
  });
  after(() => d?.cleanup());

  const podsNow = async () =>
    Object.fromEntries((await d.rt().ListPods()).pods.map((p: any) => [p.sandbox_id, p.interfaces[0].addresses.map((a: any) => a.address)]));

  it('SIGTERM exits cleanly and leaves pods up; kill -9 and restart keep every pod queryable and working', async () => {
    const kni = d.kni();
    const netns: Record<string, string> = {};
    for (const id of ['r-a', 'r-b', 'r-c']) {
      netns[id] = (await kni.CreateNetwork({ name: id, namespace: 'default' })).netns_path;
      await d.rt().Attach({ sandbox_id: id, netns_path: netns[id] });
    }
    const before = await podsNow();

    assert.equal(await d.stop('SIGTERM'), 0);
    assert.ok(ping(netns['r-a'], before['r-b'][0]), 'pods lost connectivity when the daemon stopped');
    await d.restart();
    assert.deepEqual(await podsNow(), before);

    await d.restart('SIGKILL');
    assert.deepEqual(await podsNow(), before);
    assert.ok(ping(netns['r-a'], before['r-c'][1]));
    for (const id of Object.keys(before)) assert.equal((await d.rt().Check({ sandbox_id: id })).ok, true);

    // No address of a restored pod is handed out again.
    const fresh = await d.rt().Attach({ sandbox_id: 'r-d', netns_path: (await d.kni().CreateNetwork({})).netns_path });
    const taken = new Set(Object.values(before).flat());
    for (const a of fresh.interfaces[0].addresses) assert.ok(!taken.has(a.address), `${a.address} handed out twice`);
    for (const id of ['r-a', 'r-b', 'r-c', 'r-d']) await d.rt().Detach({ sandbox_id: id });
  });

  it('rolls back an attach a crash interrupted (record written, kernel work not finished)', async () => {
    const { netns_path } = await d.kni().CreateNetwork({});
    const p = await d.rt().Attach({ sandbox_id: 'half', netns_path });
    await d.stop('SIGKILL');
    const file = `${d.stateDir}/sandboxes/half.json`;
    const rec = JSON.parse(fs.readFileSync(file, 'utf8'));
    fs.writeFileSync(file, JSON.stringify({ ...rec, phase: 'attaching' }));
    fs.rmSync(`${d.stateDir}/sandboxes/half.attached`); // the crash came before the commit mark
    await d.restart();
    assert.equal((await d.rt().ListPods()).pods.length, 0);
    assert.ok(await d.linkGone(p.interfaces[0].host_interface), 'rolled-back veth still there');
    assert.equal((await d.rt().GetIPAMStatus()).ranges[0].used, '0');
    assert.ok(fs.existsSync(netns_path), 'the netns belongs to its CreateNetwork caller until DeleteNetwork');
    // The caller never got an answer and retries: it works.
    const again = await d.rt().Attach({ sandbox_id: 'half', netns_path });
    assert.equal((await d.rt().Check({ sandbox_id: 'half' })).ok, true);
    await d.kni().DeleteNetwork({ id: 'half' });
    assert.ok(!fs.existsSync(netns_path));
    assert.ok(!(await d.kniVethsSettled(0)).includes(again.interfaces[0].host_interface));
  });

  it('kill -9 during concurrent attaches: every answered attach survives, the rest can be retried', async () => {
    const kni = d.kni();
    const paths = await Promise.all(Array.from({ length: 24 }, () => kni.CreateNetwork({}).then((r: any) => r.netns_path as string)));
    const rt = d.rt();
    const answered = new Map<string, string[]>();
    const calls = paths.map((p, i) =>
      rt.Attach({ sandbox_id: `k9-${i}`, netns_path: p }).then(
        (res: any) => answered.set(`k9-${i}`, res.interfaces[0].addresses.map((a: any) => a.address)),
        () => undefined,
      ),
    );
    await new Promise((r) => setTimeout(r, 15));
    await d.stop('SIGKILL');
    await Promise.all(calls);
    await d.restart();
    const now = await podsNow();
    for (const [id, addrs] of answered) assert.deepEqual(now[id], addrs, `${id} lost its network`);
    // Retrying every attach (as a runtime does) completes the rest without duplicates.
    const rt2 = d.rt();
    for (let i = 0; i < paths.length; i++) await rt2.Attach({ sandbox_id: `k9-${i}`, netns_path: paths[i] });
    const all = Object.values(await podsNow()).flat();
    assert.equal(new Set(all).size, all.length);
    assert.equal((await d.kniVethsSettled(paths.length)).length, paths.length);
    const gc = await rt2.GarbageCollect({ live_sandbox_ids: [] });
    assert.equal(gc.released_sandbox_ids.length, paths.length);
    assert.equal((await d.kniVethsSettled(0)).length, 0);
    assert.deepEqual(fs.readdirSync(d.netnsDir), []);
  });
});
