// A node whose FORWARD policy is DROP (Docker sets it, firewalld and ufw may): kni accepts its
// pods' forwarded traffic in KNI-FWD, jumped to from the end of FORWARD, so routed pods still
// reach each other while an admin's rule placed before it still decides first; reconcile puts
// the chain back; allowPodForwarding: false leaves FORWARD to the admin.
import assert from 'node:assert/strict';
import { Client } from '../plugin/client/clients';
import { ConfigError, parseConfig } from '../plugin/core/config';
import { inNetns, ping } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

describe('pods\' forwarded traffic on a node whose FORWARD policy is DROP (real kernel, iptables)', () => {
  const daemons: TestDaemon[] = [];
  after(() => daemons.forEach((d) => d.cleanup()));

  async function node(prefix: string, config: Record<string, unknown>): Promise<{ d: TestDaemon; rt: Client; pods: { netns: string; v4: string; v6: string }[] }> {
    const d = await TestDaemon.start(config);
    daemons.push(d);
    for (const tool of ['iptables', 'ip6tables']) assert.ok(inNetns(d.nodeNetns, tool, ['-P', 'FORWARD', 'DROP']).ok);
    const rt = d.rt();
    const pods = [];
    for (const id of [`${prefix}-a`, `${prefix}-b`]) {
      const netns = d.makePodNetns(id);
      const p = await rt.Attach({ sandbox_id: id, netns_path: netns });
      pods.push({ netns, v4: p.interfaces[0].addresses[0].address, v6: p.interfaces[0].addresses[1]?.address ?? '' });
    }
    return { d, rt, pods };
  }
  const rules = (d: TestDaemon, tool: string, chain: string) => inNetns(d.nodeNetns, tool, ['-t', 'filter', '-S', chain]).out.split('\n').filter((l) => l.startsWith('-A'));

  it('routed pods reach each other through the node; an admin\'s rule before kni\'s still decides; reconcile puts the chain back', async () => {
    const { d, rt, pods: [a, b] } = await node('fwd', { ranges: ['10.73.0.0/24', 'fd00:73::/64'], reconcileSeconds: 3600 });
    assert.ok(ping(a.netns, b.v4), 'IPv4 pod → pod dropped by FORWARD');
    assert.ok(ping(a.netns, b.v6), 'IPv6 pod → pod dropped by FORWARD');
    assert.deepEqual(rules(d, 'iptables', 'KNI-FWD'), ['-A KNI-FWD -s 10.73.0.0/24 -j ACCEPT', '-A KNI-FWD -d 10.73.0.0/24 -j ACCEPT']);
    assert.deepEqual(rules(d, 'ip6tables', 'KNI-FWD'), ['-A KNI-FWD -s fd00:73::/64 -j ACCEPT', '-A KNI-FWD -d fd00:73::/64 -j ACCEPT']);
    assert.match(rules(d, 'iptables', 'FORWARD').at(-1)!, /-j KNI-FWD$/);
    // Placed before kni's jump, an admin's (or a policy agent's) rule decides first.
    assert.ok(inNetns(d.nodeNetns, 'iptables', ['-I', 'FORWARD', '-d', `${b.v4}/32`, '-j', 'DROP']).ok);
    assert.equal(ping(a.netns, b.v4), false, 'the admin\'s DROP before kni\'s jump did not apply');
    assert.ok(inNetns(d.nodeNetns, 'iptables', ['-D', 'FORWARD', '-d', `${b.v4}/32`, '-j', 'DROP']).ok);
    assert.deepEqual((await rt.Reconcile({})).findings, []);
    // Flushed behind kni's back: found, named and written again.
    assert.ok(inNetns(d.nodeNetns, 'iptables', ['-F', 'KNI-FWD']).ok);
    assert.equal(ping(a.netns, b.v4), false);
    assert.match((await rt.Reconcile({})).findings.join('\n'), /IPv4 filter chain KNI-FWD was changed \(0 rules; kni wrote 2\)/);
    assert.ok(ping(a.netns, b.v4), 'not put back');
    assert.deepEqual((await rt.Reconcile({})).findings, []);
  });

  it('allowPodForwarding: false leaves FORWARD to the node\'s admin: no chain, no jump, and DROP applies', async () => {
    const { d, pods: [a, b] } = await node('nofwd', { ranges: ['10.74.0.0/24'], allowPodForwarding: false });
    assert.equal(ping(a.netns, b.v4), false, 'forwarded under a DROP policy without kni\'s rules');
    assert.equal(inNetns(d.nodeNetns, 'iptables', ['-t', 'filter', '-S', 'KNI-FWD']).ok, false);
    assert.doesNotMatch(rules(d, 'iptables', 'FORWARD').join('\n'), /KNI-FWD/);
    assert.throws(() => parseConfig({ allowPodForwarding: 'yes' }), (e: Error) => e instanceof ConfigError && /allowPodForwarding must be true or false/.test(e.message));
  });
});
