// Detaches that answer before the kernel's veth delete (the netns is ending: a runtime stopping
// the sandbox), and that it leaks nothing: the retired veths go in batches, a netns reused at
// once still gets its pod wired, and retired veths a crash left are neither taken for pods nor
// kept. A plain detach (the caller keeps the netns) sets the pod end down and renamed first, so
// its netns is free at the answer; when it cannot, its delete comes before the answer, shared
// by the detaches that come together.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { Client } from '../plugin/client/clients';
import { hostVethName } from '../plugin/core/network-runtime';
import { DELETE_GROUP } from '../plugin/pod/veth-batch-delete';
import { REAP_GROUP } from '../plugin/pod/veth-reaper';
import { rejectsWith } from './helpers/expect';
import { inNetns, sh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

describe('detach without waiting for the kernel (veth reaper)', () => {
  let d: TestDaemon;
  let rt: Client;
  before(async () => {
    d = await TestDaemon.start({}, { args: ['--log-level', 'debug'] });
    rt = d.rt();
  });
  after(() => d?.cleanup());

  const rawLinks = () => sh('ip', ['-n', d.nodeNetnsName, '-o', 'link', 'show']);

  it('16 detaches at once (netns ending) all answer, and every veth is gone moments later', async () => {
    const pods = Array.from({ length: 16 }, (_, i) => ({ id: `rp${i}`, netns: d.makePodNetns(`rp${i}`) }));
    for (const p of pods) await rt.Attach({ sandbox_id: p.id, netns_path: p.netns });
    const answers = await Promise.all(pods.map((p) => rt.Detach({ sandbox_id: p.id, netns_ending: true })));
    assert.ok(answers.every((a) => a.released));
    assert.deepEqual((await rt.ListPods({})).pods, []);
    await waitFor(() => !pods.some((p) => rawLinks().includes(hostVethName(p.id, 'eth0'))), 20_000, rawLinks);
    for (const p of pods) assert.doesNotMatch(inNetns(p.netns, 'ip', ['-o', 'link']).out, /eth0/);
  });

  it('a netns reused at once after such a detach (another sandbox id) is wired all the same', async () => {
    const netns = d.makePodNetns('rp-reuse');
    for (let i = 0; i < 10; i++) {
      await rt.Attach({ sandbox_id: `reuse${i}`, netns_path: netns });
      await rt.Detach({ sandbox_id: `reuse${i}`, netns_ending: true });
    }
    const p = await rt.Attach({ sandbox_id: 'reuse-last', netns_path: netns });
    assert.deepEqual((await rt.Check({ sandbox_id: 'reuse-last' })).problems, []);
    assert.match(inNetns(netns, 'ip', ['-o', '-4', 'addr', 'show', 'dev', 'eth0']).out, new RegExp(p.interfaces[0].addresses[0].address.replace(/\./g, '\\.')));
    await rt.Detach({ sandbox_id: 'reuse-last' });
    assert.doesNotMatch(inNetns(netns, 'ip', ['-o', 'link']).out, /eth0/, 'a plain Detach must leave the netns without the pod end');
  });

  it('8 plain detaches at once: each answers with its netns kept and free of the pod (no eth0, no route of it: the caller may add its own eth0 at once), the veths deleted moments later', async () => {
    const pods = Array.from({ length: 8 }, (_, i) => ({ id: `rn${i}`, netns: d.makePodNetns(`rn${i}`) }));
    const nets: any[] = [];
    for (const p of pods) nets.push(await rt.Attach({ sandbox_id: p.id, netns_path: p.netns }));
    const mark = d.output.length;
    // Looked at the moment each answer arrives, not once all have.
    const atAnswer = await Promise.all(
      pods.map((p) =>
        rt.Detach({ sandbox_id: p.id }).then(() => ({
          links: inNetns(p.netns, 'ip', ['-o', 'link']).out,
          addrs: inNetns(p.netns, 'ip', ['-o', 'addr']).out,
          routes: inNetns(p.netns, 'ip', ['route', 'show', 'table', 'all']).out,
          // What a caller that keeps its netns may do next: an eth0 of its own, with a default route.
          reuse: inNetns(p.netns, 'sh', ['-c', 'ip link add eth0 type veth peer name eth0p && ip link set eth0p up && ip link set eth0 up && ip addr add 192.0.2.2/24 dev eth0 && ip route add default via 192.0.2.1 && ip -6 route add default dev eth0']),
        })),
      ),
    );
    atAnswer.forEach((a, i) => {
      assert.doesNotMatch(a.links, /\beth0\b/, 'the pod end still has its name at the answer');
      // The kernel keeps a down link's IPv4 addresses, but no route to or from them.
      for (const addr of nets[i].interfaces[0].addresses) assert.ok(!a.routes.includes(addr.address), `a route of ${addr.address} is left:\n${a.routes}`);
      assert.doesNotMatch(a.addrs, /inet6 fd/, 'the pod end kept its IPv6 address');
      assert.doesNotMatch(a.routes, /default/, 'the pod\'s default routes are left');
      assert.ok(a.reuse.ok, `the caller could not add its own eth0 and default routes: ${a.reuse.out}`);
    });
    for (const p of pods) assert.ok(fs.existsSync(p.netns));
    assert.doesNotMatch(d.output.slice(mark), /host veths deleted together/, 'a detach deleted its veth before answering');
    // The host veths, and the renamed pod ends with them, go with the reaper's next batch.
    await waitFor(() => pods.every((p) => !/kniold/.test(inNetns(p.netns, 'ip', ['-o', 'link']).out)), 20_000, () => inNetns(pods[0].netns, 'ip', ['-o', 'link']).out);
    for (const p of pods) assert.ok(!rawLinks().includes(hostVethName(p.id, 'eth0')));
  });

  it('a plain detach and an attach of the same sandbox into the same netns at once, 5 times: each attach is wired whole', async () => {
    const netns = d.makePodNetns('rn-again');
    for (let i = 0; i < 5; i++) {
      const p = await rt.Attach({ sandbox_id: 'rn-again', netns_path: netns });
      assert.deepEqual((await rt.Check({ sandbox_id: 'rn-again' })).problems, []);
      assert.match(inNetns(netns, 'ip', ['-o', '-4', 'addr', 'show', 'dev', 'eth0']).out, new RegExp(`${p.interfaces[0].addresses[0].address.replace(/\./g, '\\.')}/`));
      await rt.Detach({ sandbox_id: 'rn-again' });
    }
    await waitFor(() => !/kniold/.test(inNetns(netns, 'ip', ['-o', 'link']).out), 20_000, () => inNetns(netns, 'ip', ['-o', 'link']).out);
  });

  it('8 plain detaches whose pod ends are not where kni left them delete their veths before answering, together', async () => {
    const pods = Array.from({ length: 8 }, (_, i) => ({ id: `rm${i}`, netns: d.makePodNetns(`rm${i}`) }));
    for (const p of pods) await rt.Attach({ sandbox_id: p.id, netns_path: p.netns });
    // Renamed behind kni's back: kni does not take down a link it cannot tell is its pod end.
    for (const p of pods) inNetns(p.netns, 'ip', ['link', 'set', 'eth0', 'name', 'moved0']);
    const mark = d.output.length;
    const podEndAtAnswer = await Promise.all(pods.map((p) => rt.Detach({ sandbox_id: p.id }).then(() => inNetns(p.netns, 'ip', ['-o', 'link']).out)));
    for (const links of podEndAtAnswer) assert.doesNotMatch(links, /moved0/);
    for (const p of pods) assert.ok(!rawLinks().includes(hostVethName(p.id, 'eth0')));
    const batches = d.output.slice(mark).split('\n').filter((l) => l.includes('host veths deleted together')).map((l) => JSON.parse(l).count as number);
    assert.equal(batches.reduce((a, b) => a + b, 0), 8, d.output.slice(mark));
    assert.ok(batches.length < 8, `8 detaches at once took ${batches.length} kernel deletes`);
  });

  for (const [kind, group] of [['retired', REAP_GROUP], ['about to be deleted with others', DELETE_GROUP]] as const) {
    it(`a veth a crash left ${kind} (its pod netns still there) is not rebuilt into a pod at start, and is deleted`, async () => {
      const id = `crashed${group}`;
      const netns = d.makePodNetns(id);
      const veth = hostVethName(id, 'eth0');
      // What a kill -9 between the move to the group and the group's delete leaves.
      sh('ip', ['-n', d.nodeNetnsName, 'link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns.split('/').pop()!]);
      sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', veth, 'alias', `kni-released:${id}`, 'group', String(group)]);
      await d.restart('SIGKILL');
      rt = d.rt();
      await rejectsWith(rt.GetPod({ sandbox_id: id }), grpc.status.NOT_FOUND, /not attached/);
      await waitFor(() => !rawLinks().includes(veth), 20_000, rawLinks);
    });
  }
});
