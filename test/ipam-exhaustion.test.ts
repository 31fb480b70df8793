// A /29 runs out with RESOURCE_EXHAUSTED naming the range, and the status RPC says so.
import * as grpc from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { rejectsWith } from './helpers/expect';
import { TestDaemon } from './helpers/test-daemon';

describe('IPAM exhaustion', () => {
  let d: TestDaemon;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.99.0.0/29'], bridge: 'kni29' });
  });
  after(() => d?.cleanup());

  it('hands out the 5 usable addresses of a /29, then refuses, and recovers after a detach', async () => {
    const rt = d.rt();
    const kni = d.kni();
    const ips: string[] = [];
    for (let i = 0; i < 5; i++) {
      const { netns_path } = await kni.CreateNetwork({});
      const p = await rt.Attach({ sandbox_id: `full-${i}`, netns_path });
      ips.push(p.interfaces[0].addresses[0].address);
    }
    assert.deepEqual(ips.sort(), ['10.99.0.2', '10.99.0.3', '10.99.0.4', '10.99.0.5', '10.99.0.6']);
    const { netns_path } = await kni.CreateNetwork({});
    await rejectsWith(rt.Attach({ sandbox_id: 'full-5', netns_path }), grpc.status.RESOURCE_EXHAUSTED, /pod range 10\.99\.0\.0\/29 is exhausted: all 5 addresses are in use/);
    await rejectsWith(kni.AttachInterface({ id: 'full-5', isolation: { path: netns_path } }), grpc.status.RESOURCE_EXHAUSTED, /10\.99\.0\.0\/29/);

    const status = await rt.GetIPAMStatus();
    assert.equal(status.exhausted, true);
    assert.deepEqual(status.ranges, [{ cidr: '10.99.0.0/29', family: 'IPV4', size: '5', used: '5', free: '0', exhausted: true }]);
    // Exhausted is "no more pods here", not "node not ready": running pods must not be evicted.
    assert.equal((await rt.GetNode()).ready, true);
    assert.equal(d.nodeLinks().filter((l) => /^kni[0-9a-f]{12}$/.test(l)).length, 5, 'a refused attach left a veth');

    await rt.Detach({ sandbox_id: 'full-2' });
    assert.equal((await rt.GetIPAMStatus()).exhausted, false);
    const p = await rt.Attach({ sandbox_id: 'full-5', netns_path });
    assert.match(p.interfaces[0].addresses[0].address, /^10\.99\.0\.[2-6]$/);
  });
});
