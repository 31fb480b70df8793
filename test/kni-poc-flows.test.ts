// Both KNI POC client flows, unchanged, through a gRPC client built from proto/kni/kni.proto.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { Client } from '../plugin/client/clients';
import { hostVethName } from '../plugin/core/network-runtime';
import { netnsFds } from './helpers/netns-fds';
import { inNetns, ping } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

describe('KNI POC API flows', () => {
  let d: TestDaemon;
  let kni: Client;
  let rt: Client;

  before(async () => {
    d = await TestDaemon.start({}, { args: ['--log-level', 'debug'] });
    kni = d.kni();
    rt = d.rt();
  });
  after(() => d?.cleanup());

  it('kubelet fork: CreateNetwork → AttachInterface(extradata netns) → QueryPodNetwork → DetachInterface → DeleteNetwork', async () => {
    const meta = { name: 'web-0', namespace: 'shop' };
    const created = await kni.CreateNetwork({ ...meta, labels: { app: 'web' } });
    assert.match(created.netns_path, new RegExp(`^${d.netnsDir}/kni-[0-9a-f]{16}$`));
    const second = await kni.CreateNetwork(meta); // a second sandbox of the same pod: its own netns
    assert.notEqual(second.netns_path, created.netns_path);
    await kni.DeleteNetwork({ netns_path: second.netns_path });
    assert.ok(!fs.existsSync(second.netns_path));

    const id = 'a'.repeat(64);
    const attached = await kni.AttachInterface({
      id, ...meta,
      labels: { app: 'web' },
      annotations: { 'kubernetes.io/config.source': 'api' },
      extradata: { netns: created.netns_path, cgroupPath: '/kubepods/pod1' },
      dns_config: { servers: ['10.96.0.10'], searches: ['shop.svc.cluster.local'], options: ['ndots:5'] },
      port_mappings: [{ protocol: 'TCP', container_port: 80, host_port: 8080, host_ip: '' }],
    });
    const eth0 = attached.ipconfigs.eth0;
    assert.equal(eth0.ip.length, 2);
    assert.match(eth0.ip[0], /^10\.244\.0\.\d+$/);
    assert.match(eth0.ip[1], /^fd00:10:244::/);
    assert.match(eth0.mac, /^0a:58:/);

    const queried = await kni.QueryPodNetwork({ id, ...meta });
    assert.deepEqual(queried.ipconfigs, attached.ipconfigs);
    assert.equal(queried.extradata.netns, created.netns_path);
    assert.ok(ping(created.netns_path, '10.244.0.1'));

    const nodes = await kni.QueryNodeNetworks({});
    assert.equal(nodes.networks.length, 1);
    assert.equal(nodes.networks[0].ready, true);
    await kni.SetupNodeNetwork({}); // idempotent

    const mark = d.output.length;
    await kni.DetachInterface({ id, ...meta });
    // The netns is kni's and DeleteNetwork comes next: the answer does not wait for the
    // kernel's veth delete (≈ 15 ms here); the reaper deletes it right after.
    assert.doesNotMatch(d.output.slice(mark), /host veths deleted together/);
    assert.ok(await d.linkGone(hostVethName(id, 'eth0')));
    assert.ok(fs.existsSync(created.netns_path), 'DetachInterface must leave the netns for DeleteNetwork');
    await kni.DeleteNetwork({ id, ...meta });
    assert.ok(!fs.existsSync(created.netns_path));
    assert.equal((await rt.GetIPAMStatus()).ranges[0].used, '0');
  });

  it('kubelet fork: AttachInterface again into its kni-made netns right after DetachInterface, ten times, is wired each time', async () => {
    const { netns_path } = await kni.CreateNetwork({ name: 'job-0', namespace: 'shop' });
    const id = 'c'.repeat(64);
    try {
      for (let i = 0; i < 10; i++) {
        await kni.AttachInterface({ id, name: 'job-0', namespace: 'shop', extradata: { netns: netns_path } });
        assert.deepEqual((await rt.Check({ sandbox_id: id })).problems, [], `round ${i}`);
        await kni.DetachInterface({ id });
      }
      await kni.AttachInterface({ id, name: 'job-0', namespace: 'shop', extradata: { netns: netns_path } });
      assert.ok(ping(netns_path, '10.244.0.1'));
    } finally {
      await kni.DeleteNetwork({ id });
    }
    assert.ok(await d.linkGone(hostVethName(id, 'eth0')));
    assert.equal((await rt.GetIPAMStatus()).ranges[0].used, '0');
  });

  it('containerd fork: empty CreateNetwork, AttachInterface(isolation.path), DeleteNetwork alone releases everything', async () => {
    const unused = await kni.CreateNetwork({});
    assert.ok(fs.existsSync(unused.netns_path));
    const netns = d.makePodNetns('ctrd-pod');
    const id = 'b'.repeat(64);
    const attached = await kni.AttachInterface({ id, name: 'db-0', namespace: 'shop', isolation: { path: netns, type: 'netns' }, labels: {}, annotations: {} });
    const ip = attached.ipconfigs.eth0.ip[0];
    assert.match(inNetns(netns, 'ip', ['-o', 'addr']).out, new RegExp(`inet ${ip.replace(/\./g, '\\.')}/32`));
    const mark = d.output.length;
    await kni.DeleteNetwork({ id, name: 'db-0', netns_path: netns });
    // containerd removes its netns next: the answer does not wait for the kernel's veth delete.
    assert.doesNotMatch(d.output.slice(mark), /host veths deleted together/);
    assert.ok(await d.linkGone(hostVethName(id, 'eth0')));
    assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/);
    assert.equal((await rt.GetIPAMStatus()).ranges[0].used, '0');
    assert.equal((await rt.ListPods()).pods.length, 0);
    // The netns the empty CreateNetwork made is claimed by nobody: GC releases it after the grace time.
    assert.ok(fs.existsSync(unused.netns_path));
  });

  it('CreateNetwork pins a netns made ahead: each new, its own, with only lo; the pool is topped up and pins none of its own', async () => {
    const pinnedBefore = new Set(fs.readdirSync(d.netnsDir));
    const first = await kni.CreateNetwork({ name: 'pool-0', namespace: 'shop' });
    const paths = [first.netns_path];
    const inodes = new Set([fs.statSync(first.netns_path).ino]);
    for (let i = 1; i <= 3; i++) {
      const ahead = await netnsHeldAhead(d, 4);
      const { netns_path } = await kni.CreateNetwork({ name: `pool-${i}`, namespace: 'shop' });
      paths.push(netns_path);
      const ino = fs.statSync(netns_path).ino;
      assert.ok(ahead.has(ino), `netns ${netns_path} (inode ${ino}) was not one the daemon held ahead (${[...ahead]})`);
      assert.ok(!inodes.has(ino), 'CreateNetwork handed out a netns twice');
      inodes.add(ino);
      const links = inNetns(netns_path, 'ip', ['-o', 'link']).out.trim().split('\n');
      assert.equal(links.length, 1, links.join('\n'));
      assert.match(links[0], /^1: lo: .*state DOWN/);
    }
    // The pins are exactly the netns CreateNetwork answered: the pool's are held, never pinned.
    assert.deepEqual(fs.readdirSync(d.netnsDir).filter((n) => !pinnedBefore.has(n)).sort(), paths.map((p) => p.slice(d.netnsDir.length + 1)).sort());
    for (const netns_path of paths) await kni.DeleteNetwork({ netns_path });
  });

  it('netnsPoolSize 0: CreateNetwork makes each netns in the call and the daemon holds none ahead', async () => {
    const g = await TestDaemon.start({ netnsPoolSize: 0 });
    try {
      const c = g.kni();
      const made = [];
      for (let i = 0; i < 3; i++) made.push((await c.CreateNetwork({})).netns_path);
      await new Promise((r) => setTimeout(r, 200));
      assert.deepEqual([...(await netnsHeldAhead(g, 0))], []);
      assert.equal(new Set(made.map((p) => fs.statSync(p).ino)).size, 3);
      for (const netns_path of made) await c.DeleteNetwork({ netns_path });
    } finally {
      g.cleanup();
    }
  });

  it('GC releases a CreateNetwork netns no attach claimed, once the grace time is over', async () => {
    const g = await TestDaemon.start({ unclaimedNetnsGraceSeconds: 0 });
    try {
      const c = g.kni();
      const { netns_path } = await c.CreateNetwork({});
      // A netns an attach went into is claimed by its sandbox, and kept while the sandbox lives.
      const claimed = await c.CreateNetwork({ name: 'gc-0', namespace: 'gc' });
      const id = 'c'.repeat(64);
      await c.AttachInterface({ id, name: 'gc-0', namespace: 'gc', labels: {}, annotations: {}, extradata: { netns: claimed.netns_path } });
      await new Promise((r) => setTimeout(r, 5));
      const res = await g.rt().GarbageCollect({ live_sandbox_ids: [id] });
      assert.deepEqual(res.released_netns_paths, [netns_path]);
      assert.ok(!fs.existsSync(netns_path));
      assert.ok(fs.existsSync(claimed.netns_path));
      await c.DeleteNetwork({ id, netns_path: claimed.netns_path });
      assert.ok(!fs.existsSync(claimed.netns_path));
    } finally {
      g.cleanup();
    }
  });
});

/**
 * Inodes of the netns the daemon holds open that are neither its node netns nor pinned in its
 * netns dir (the pool's), once there are at least n (or after 5 s).
 */
async function netnsHeldAhead(d: TestDaemon, n: number): Promise<Set<number>> {
  const held = () => {
    const known = new Set([fs.statSync(d.nodeNetns).ino, ...fs.readdirSync(d.netnsDir).map((f) => fs.statSync(`${d.netnsDir}/${f}`).ino)]);
    return new Set([...netnsFds(d.proc!.pid!).values()].filter((ino) => !known.has(ino)));
  };
  for (let i = 0; i < 200; i++) {
    const s = held();
    if (s.size >= n) return s;
    await new Promise((r) => setTimeout(r, 25));
  }
  return held();
}
