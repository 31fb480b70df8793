// Many sandboxes at once: 16 concurrent attaches of 200 sandboxes get 200 distinct addresses.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { inParallel } from './helpers/pool';
import { TestDaemon } from './helpers/test-daemon';

const pool = <T>(width: number, items: T[], fn: (item: T) => Promise<void>) => inParallel(width, items.length, (i) => fn(items[i]));

describe('concurrency', () => {
  let d: TestDaemon;
  before(async () => {
    d = await TestDaemon.start();
  });
  after(() => d?.cleanup());

  it('16-way attach of 200 sandboxes: 200 distinct addresses per family, then 16-way detach leaves nothing', async () => {
    const rt = d.rt();
    const kni = d.kni();
    const ids = Array.from({ length: 200 }, (_, i) => `conc-${i}`);
    const v4 = new Map<string, string>();
    const v6 = new Map<string, string>();
    await pool(16, ids, async (id) => {
      const { netns_path } = await kni.CreateNetwork({ name: id, namespace: 'load' });
      const p = await rt.Attach({ sandbox_id: id, netns_path });
      v4.set(id, p.interfaces[0].addresses[0].address);
      v6.set(id, p.interfaces[0].addresses[1].address);
    });
    assert.equal(new Set(v4.values()).size, 200);
    assert.equal(new Set(v6.values()).size, 200);
    assert.equal((await rt.ListPods()).pods.length, 200);
    assert.equal(d.nodeLinks().filter((l) => /^kni[0-9a-f]{12}$/.test(l)).length, 200);
    assert.equal((await rt.GetIPAMStatus()).ranges[0].used, '200');
    // Every thread of the daemon (the main one entered each pod's netns; the reaper and the
    // netns pool's thread enter others) is back in the node's netns.
    const expected = fs.statSync(d.nodeNetns).ino;
    const threads = fs.readdirSync(`/proc/${d.proc!.pid}/task`);
    assert.ok(threads.length > 1);
    for (const t of threads) assert.equal(fs.statSync(`/proc/${d.proc!.pid}/task/${t}/ns/net`).ino, expected, `thread ${t} is not in the node netns`);
    // Same id attached again concurrently with itself: one network, same answer.
    const [x, y] = await Promise.all([rt.GetPod({ sandbox_id: 'conc-7' }), rt.Attach({ sandbox_id: 'conc-7', netns_path: (await rt.GetPod({ sandbox_id: 'conc-7' })).netns_path })]);
    assert.deepEqual(x, y);

    await pool(16, ids, async (id) => {
      const r = await rt.Detach({ sandbox_id: id });
      assert.equal(r.released, true);
    });
    assert.equal((await rt.ListPods()).pods.length, 0);
    assert.equal((await d.kniVethsSettled(0)).length, 0);
    assert.equal((await rt.GetIPAMStatus()).ranges[0].used, '0');
  });
});
