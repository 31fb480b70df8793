// The daemon goes away (SIGTERM, kill -9) and comes back: pods keep their network and records.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { hostVethName } from '../plugin/core/network-runtime';
import { inNetns, ping, sh } from './helpers/sh';
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

    await d.stop('SIGKILL');
    assert.ok(ping(netns['r-a'], before['r-c'][1]), 'pods lost connectivity while kni was down after kill -9');
    d.closeClients();
    await d.launch();
    assert.deepEqual(await podsNow(), before);
    assert.ok(ping(netns['r-a'], before['r-c'][1]));
    for (const id of Object.keys(before)) assert.equal((await d.rt().Check({ sandbox_id: id })).ok, true);

    // No address of a restored pod is handed out again.
    const fresh = await d.rt().Attach({ sandbox_id: 'r-d', netns_path: (await d.kni().CreateNetwork({})).netns_path });
    const taken = new Set(Object.values(before).flat());
    for (const a of fresh.interfaces[0].addresses) assert.ok(!taken.has(a.address), `${a.address} handed out twice`);
    for (const id of ['r-a', 'r-b', 'r-c', 'r-d']) await d.rt().Detach({ sandbox_id: id });
  });

  it('addresses go on after the last one given across restarts (SIGTERM, kill -9, every pod gone as after a reboot): one just released is not handed out at once', async () => {
    const netns = new Map<string, string>();
    const v4 = async (id: string) => {
      netns.set(id, d.makePodNetns(id));
      return (await d.rt().Attach({ sandbox_id: id, netns_path: netns.get(id) })).interfaces[0].addresses[0].address as string;
    };
    const last = (a: string) => Number(a.split('.')[3]);
    try {
      const a = await v4('ac-a');
      const b = await v4('ac-b');
      assert.equal(last(b), last(a) + 1);
      await d.rt().Detach({ sandbox_id: 'ac-b' });
      // Graceful: the newest pod is gone, so only what the shutdown wrote knows where allocation was.
      assert.equal(await d.stop('SIGTERM'), 0);
      d.closeClients();
      await d.launch();
      const c = await v4('ac-c');
      assert.equal(last(c), last(b) + 1, `${c}: the address released before the restart (${b}) or an earlier one was handed out again`);
      // kill -9: the newest record (made after the file was last written) says where to go on.
      await d.restart('SIGKILL');
      const e = await v4('ac-e');
      assert.equal(last(e), last(c) + 1);
      // Every pod's netns gone while kni was down (a reboot): all released at start, still no reuse.
      await d.stop('SIGKILL');
      for (const id of ['ac-a', 'ac-c', 'ac-e']) sh('ip', ['netns', 'del', path.basename(netns.get(id)!)]);
      d.closeClients();
      await d.launch();
      assert.deepEqual((await d.rt().ListPods()).pods.map((p: any) => p.sandbox_id), []);
      const f = await v4('ac-f');
      assert.equal(last(f), last(e) + 1);
    } finally {
      for (const id of netns.keys()) await d.rt().Detach({ sandbox_id: id }).catch(() => undefined);
    }
  });

  it('rolls back an attach a crash interrupted: its record still attaching (written in the file-per-record layout of earlier versions, which a start imports), veth made, no address yet', async () => {
    const { netns_path } = await d.kni().CreateNetwork({});
    await d.stop('SIGKILL');
    // What a kill -9 between veth.create and pod.addresses leaves: the record (phase attaching,
    // no .attached mark) and a veth whose pod end sits in the netns with no address.
    const hostVeth = hostVethName('half', 'eth0');
    const rec = {
      id: 'half', phase: 'attaching', pod: { name: '', namespace: '', uid: '' }, labels: {}, annotations: {}, runtimeHandler: '', kind: 'container', entryPoint: 'kni',
      netnsPath: netns_path, ownedNetns: path.basename(netns_path),
      interfaces: [{ name: 'eth0', hostVeth, mac: '0a:58:0a:f4:00:02', mtu: 1500, addresses: [
        { family: 4, address: '10.244.0.2', prefixLength: 24, gateway: '10.244.0.1', range: '10.244.0.0/24' },
        { family: 6, address: 'fd00:10:244::2', prefixLength: 64, gateway: 'fd00:10:244::1', range: 'fd00:10:244::/64' },
      ] }],
      createdAt: new Date().toISOString(),
    };
    // In the layout of kni before its record logs (a file per record): imported at start.
    fs.mkdirSync(`${d.stateDir}/sandboxes`, { recursive: true });
    fs.writeFileSync(`${d.stateDir}/sandboxes/half.json`, JSON.stringify(rec));
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns_path]);
    assert.doesNotMatch(inNetns(netns_path, 'ip', ['-o', 'addr', 'show', 'dev', 'eth0']).out, /inet/);
    const from = d.output.length;
    d.closeClients();
    await d.launch();
    assert.match(d.output.slice(from), /rolling back an attach interrupted by a restart.*"sandbox":"half"/);
    assert.equal((await d.rt().ListPods()).pods.length, 0);
    assert.ok(await d.linkGone(hostVeth), 'rolled-back veth still there');
    assert.doesNotMatch(inNetns(netns_path, 'ip', ['-o', 'link']).out, /eth0/);
    assert.equal((await d.rt().GetIPAMStatus()).ranges[0].used, '0');
    assert.ok(fs.existsSync(netns_path), 'the netns belongs to its CreateNetwork caller until DeleteNetwork');
    // The caller never got an answer and retries: it works, with the addresses it would have had.
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
    let killed: Promise<unknown> | undefined;
    let outstanding = 0;
    let inFlightAtKill = 0;
    // Four streams of attaches, one call each at a time (a daemon finishes a burst of calls
    // before it writes any answer, so a burst cannot be cut); the 8th answer triggers the kill,
    // when every other stream has a call outstanding.
    const streams = Array.from({ length: 4 }, async (_, s) => {
      for (let i = s; i < paths.length && !killed; i += 4) {
        outstanding++;
        try {
          const res = await rt.Attach({ sandbox_id: `k9-${i}`, netns_path: paths[i] });
          answered.set(`k9-${i}`, res.interfaces[0].addresses.map((a: any) => a.address));
          if (answered.size === 8 && !killed) {
            inFlightAtKill = outstanding - 1;
            killed = d.stop('SIGKILL');
          }
        } catch {
          return; // the daemon is gone
        } finally {
          outstanding--;
        }
      }
    });
    await Promise.all(streams);
    await killed;
    assert.ok(killed && inFlightAtKill >= 1, `${inFlightAtKill} attaches in flight at the kill`);
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
