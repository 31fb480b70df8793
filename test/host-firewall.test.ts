// firewalld on the node: its nftables table judges pods' forwarded traffic whatever kni accepts
// in iptables, so kni warns (GetNode, knictl node; a Node Event in a cluster) while the table is
// there, with what to let through. Real kernel: the table made with nft in the test node's netns
// (firewalld's name and family: what the warning keys on), read back by kni over nfnetlink.
import assert from 'node:assert/strict';
import { Client } from '../plugin/client/clients';
import { hostFirewallWarning } from '../plugin/node/host-firewall';
import { parseCidr } from '../plugin/ipam/ip';
import { inNetns } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

describe('firewalld on the node (real kernel, nftables)', () => {
  let d: TestDaemon;
  let rt: Client;
  // Reconcile only when asked: the checks below read what the last one found.
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.73.0.0/24', 'fd00:73::/64'], reconcileSeconds: 3600 });
    rt = d.rt();
  });
  after(() => d?.cleanup());

  const warnings = async (): Promise<string[]> => ((await rt.GetNode({})).warnings as string[]).filter((w) => /firewalld/.test(w));
  const nft = (...args: string[]): void => {
    const r = inNetns(d.nodeNetns, 'nft', args);
    assert.ok(r.ok, `nft ${args.join(' ')}: ${r.out}`);
  };

  it('warned while its table is there, with the ranges to let through; other tables are not firewalld', async () => {
    nft('add', 'table', 'inet', 'other');
    try {
      await rt.Reconcile({});
      assert.deepEqual(await warnings(), []);
      nft('add', 'table', 'inet', 'firewalld');
      nft('add', 'chain', 'inet', 'firewalld', 'filter_FORWARD', '{ type filter hook forward priority filter + 10; policy accept; }');
      nft('add', 'rule', 'inet', 'firewalld', 'filter_FORWARD', 'reject with icmpx admin-prohibited');
      await rt.Reconcile({});
      assert.deepEqual(await warnings(), [
        "firewalld is active on this node (nftables table inet firewalld): its zones judge pods' forwarded traffic too, and its reject is final whatever kni accepts in iptables; ensure this node's pod ranges (10.73.0.0/24, fd00:73::/64) are sources of its trusted zone (firewall-cmd --permanent --zone=trusted --add-source=<range>, then firewall-cmd --reload), or pods get no answer from outside the node",
      ]);
    } finally {
      inNetns(d.nodeNetns, 'nft', ['delete', 'table', 'inet', 'firewalld']);
      inNetns(d.nodeNetns, 'nft', ['delete', 'table', 'inet', 'other']);
    }
    await rt.Reconcile({});
    assert.deepEqual(await warnings(), []);
  });

  it("in a cluster the warning asks for every node's ranges and vxlan's port; none without the table", () => {
    const ctx = { ranges: [parseCidr('10.244.1.0/24')], vxlanPort: 8472, cluster: true };
    assert.equal(hostFirewallWarning([{ family: 'ip', name: 'filter' }], ctx), undefined);
    assert.equal(
      hostFirewallWarning([{ family: 'ip', name: 'filter' }, { family: 'inet', name: 'firewalld' }], ctx),
      "firewalld is active on this node (nftables table inet firewalld): its zones judge pods' forwarded traffic too, and its reject is final whatever kni accepts in iptables; ensure every node's pod range (the cluster's pod CIDRs; this node's: 10.244.1.0/24) is a source of its trusted zone (firewall-cmd --permanent --zone=trusted --add-source=<range>, then firewall-cmd --reload), and that vxlan's UDP port is open (firewall-cmd --permanent --add-port=8472/udp), or pods get no answer from other nodes' pods, nor from outside the node",
    );
  });
});
