// An IPv6-only node (a Kubernetes IPv6 single-stack cluster): one IPv6 range, no IPv4 at all in
// the pods; they reach each other and the node, masquerading is ip6tables', reconcile is quiet.
import assert from 'node:assert/strict';
import { Client } from '../plugin/client/clients';
import { masqueradeTable } from './helpers/masquerade-table';
import { inNetns, ping } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

describe('IPv6-only node (real kernel)', () => {
  let d: TestDaemon;
  let rt: Client;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['fd00:73::/64'], reconcileSeconds: 3600 });
    rt = d.rt();
  });
  after(() => d?.cleanup());

  it('pods get one IPv6 address and an IPv6 default route only, reach each other and the node; masquerade and reconcile follow', async () => {
    const a = await rt.Attach({ sandbox_id: 'v6-a', netns_path: d.makePodNetns('v6-a') });
    const b = await rt.Attach({ sandbox_id: 'v6-b', netns_path: d.makePodNetns('v6-b') });
    assert.deepEqual(a.interfaces[0].addresses.map((x: any) => [x.family, x.prefix_length, x.gateway]), [['IPV6', 128, 'fd00:73::1']]);
    const netnsA = (await rt.GetPod({ sandbox_id: 'v6-a' })).netns_path;
    assert.equal(inNetns(netnsA, 'ip', ['-4', 'addr', 'show', 'scope', 'global']).out.trim(), '');
    assert.equal(inNetns(netnsA, 'ip', ['-4', 'route']).out.trim(), '');
    assert.match(inNetns(netnsA, 'ip', ['-6', 'route', 'show', 'default']).out, /default via fd00:73::1 dev eth0/);
    assert.ok(ping(netnsA, b.interfaces[0].addresses[0].address), 'pod → pod over IPv6');
    assert.ok(ping(netnsA, 'fd00:73::1'), 'pod → its gateway on the node');
    const masq = masqueradeTable(d.nodeNetns)!;
    assert.deepEqual([masq.sets.pods4, masq.sets.pods6, masq.sets.keep6], [[], ['fd00:73::/64'], ['fd00:73::/64', 'ff00::/8']]);
    assert.equal((await rt.GetNode({})).ready, true);
    assert.deepEqual((await rt.Reconcile({})).findings, []);
    const ipam = (await rt.GetIPAMStatus({})).ranges;
    assert.deepEqual(ipam.map((r: any) => [r.cidr, r.family, r.used]), [['fd00:73::/64', 'IPV6', '2']]);
    for (const id of ['v6-a', 'v6-b']) await rt.Detach({ sandbox_id: id });
  });
});
