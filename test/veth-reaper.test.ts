// Detaches that answer before the kernel's veth delete (the netns is ending: a runtime stopping
// the sandbox), and that it leaks nothing: the retired veths go in batches, a netns reused at
// once still gets its pod wired, and retired veths a crash left are neither taken for pods nor
// kept. Detaches that wait for the delete (plain ones) share it when they come together.
import assert from 'node:assert/strict';
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

  it('8 plain detaches at once: each answers with its pod end gone and the netns kept, the veths deleted together', async () => {
    const pods = Array.from({ length: 8 }, (_, i) => ({ id: `rn${i}`, netns: d.makePodNetns(`rn${i}`) }));
    for (const p of pods) await rt.Attach({ sandbox_id: p.id, netns_path: p.netns });
    const mark = d.output.length;
    // Looked at the moment each answer arrives, not once all have.
    const podEndAtAnswer = await Promise.all(pods.map((p) => rt.Detach({ sandbox_id: p.id }).then(() => inNetns(p.netns, 'ip', ['-o', 'link']).out)));
    for (const links of podEndAtAnswer) assert.doesNotMatch(links, /eth0/);
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
