// The node network changed behind kni's back — the bridge set down, its gateways flushed,
// forwarding turned off, the masquerade rules flushed — is found by reconcile, named, and set up
// again; an untouched node gives no finding at all.
import assert from 'node:assert/strict';
import { Client } from '../plugin/client/clients';
import { inNetns, sh } from './helpers/sh';
import { knictl } from './helpers/knictl';
import { masqueradeTable } from './helpers/masquerade-table';
import { TestDaemon } from './helpers/test-daemon';

describe('node network drift (real kernel, iptables)', () => {
  let d: TestDaemon;
  let rt: Client;
  const node = () => d.nodeNetns;
  // Reconcile only when asked: the periodic one, or one started by the kernel's notice of the
  // bridge set down (test/kernel-notices.test.ts), would race the checks here.
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.71.0.0/24', 'fd00:71::/64'], reconcileSeconds: 3600, repairOnNotice: false }, { args: ['--metrics-addr', '127.0.0.1:9273'] });
    rt = d.rt();
  });
  after(() => d?.cleanup());

  const inNode = (tool: string, args: string[]) => {
    const r = inNetns(node(), tool, args);
    assert.ok(r.ok, `${tool} ${args.join(' ')}: ${r.out}`);
  };
  const reconcileFindings = async () => (await rt.Reconcile({})).findings.join('\n');
  const sysctl = (key: string) => inNetns(node(), 'sysctl', ['-n', key]).out.trim();
  const masq = () => masqueradeTable(node())!;

  it('an untouched node: no finding (the checks read what setup wrote as it is)', async () => {
    assert.equal(await reconcileFindings(), '');
    assert.equal(await reconcileFindings(), '');
  });

  it('the bridge set down: set up again', async () => {
    const netns = d.makePodNetns('down');
    await rt.Attach({ sandbox_id: 'down', netns_path: netns });
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', 'kni0', 'down']);
    assert.match((await rt.GetNode({})).networks[0].reason, /bridge kni0 is down/);
    assert.match(await reconcileFindings(), /node network was not ready \(bridge kni0 is down\); set up again/);
    assert.match(sh('ip', ['-n', d.nodeNetnsName, 'link', 'show', 'kni0']), /[<,]UP[,>]/);
    assert.equal((await rt.GetNode({})).ready, true);
    assert.deepEqual((await rt.Check({ sandbox_id: 'down' })).problems, []);
    await rt.Detach({ sandbox_id: 'down' });
  });

  it("the bridge's gateway addresses flushed: put back", async () => {
    sh('ip', ['-n', d.nodeNetnsName, 'addr', 'flush', 'dev', 'kni0']);
    const f = await reconcileFindings();
    assert.match(f, /node network changed behind kni's back \(gateway 10\.71\.0\.1\/24 is missing from kni0; gateway fd00:71::1\/64 is missing from kni0\); set up again/);
    const addrs = sh('ip', ['-n', d.nodeNetnsName, 'addr', 'show', 'dev', 'kni0']);
    assert.match(addrs, /inet 10\.71\.0\.1\/24/);
    assert.match(addrs, /inet6 fd00:71::1\/64/);
    assert.equal(await reconcileFindings(), '');
  });

  it('forwarding and IPv6 proxy NDP turned off: turned on again', async () => {
    inNode('sysctl', ['-qw', 'net.ipv4.ip_forward=0']);
    inNode('sysctl', ['-qw', 'net.ipv6.conf.all.forwarding=0']);
    inNode('sysctl', ['-qw', 'net.ipv6.conf.all.proxy_ndp=0']);
    assert.match(await reconcileFindings(), /net\.ipv4\.ip_forward is off; net\.ipv6\.conf\.all\.forwarding is off; net\.ipv6\.conf\.all\.proxy_ndp is off/);
    assert.equal(sysctl('net.ipv4.ip_forward'), '1');
    assert.equal(sysctl('net.ipv6.conf.all.forwarding'), '1');
    assert.equal(sysctl('net.ipv6.conf.all.proxy_ndp'), '1');
  });

  it('the masquerade table flushed or changed: written again', async () => {
    const want = masq();
    assert.deepEqual([...want.sets.keep4].sort(), ['10.71.0.0/24', '224.0.0.0/4', '255.255.255.255']);
    assert.equal(want.rules.length, 2);
    inNode('nft', ['flush', 'chain', 'inet', 'kni-masquerade', 'postrouting']);
    inNode('nft', ['delete', 'element', 'inet', 'kni-masquerade', 'keep6', '{ ff00::/8 }']);
    const f = await reconcileFindings();
    assert.match(f, /the masquerade set keep6 was changed \(1 elements; kni wrote 2\)/);
    assert.match(f, /the masquerade chain postrouting holds 0 of kni's 2 rules/);
    assert.deepEqual(masq(), want);
    // An element slipped into kni's set (it would exempt traffic from masquerading) is found too.
    inNode('nft', ['add', 'element', 'inet', 'kni-masquerade', 'keep4', '{ 192.0.2.0/24 }']);
    assert.match(await reconcileFindings(), /the masquerade set keep4 was changed \(4 elements; kni wrote 3\)/);
    assert.deepEqual(masq(), want);
    // The whole table gone (as `nft flush ruleset` leaves it).
    inNode('nft', ['delete', 'table', 'inet', 'kni-masquerade']);
    assert.match(await reconcileFindings(), /the masquerade table inet kni-masquerade is missing/);
    assert.deepEqual(masq(), want);
    assert.equal(await reconcileFindings(), '');
  });

  it('every finding counts in kni_drift_findings_total by object, for alerts', () => {
    const metrics = inNetns(node(), 'curl', ['-s', 'http://127.0.0.1:9273/metrics']).out;
    const line = metrics.split('\n').find((l) => l.startsWith('kni_drift_findings_total{object="node_network"} '));
    assert.ok(line, metrics.split('\n').filter((l) => l.includes('drift')).join('\n'));
    // Down, gateways, forwarding, three masquerade rounds.
    assert.equal(Number(line.split(' ')[1]), 6);
  });

  it('GetNode and knictl node list what was put back, newest last', async () => {
    const repairs = (await rt.GetNode({})).repairs;
    assert.equal(repairs.length, 6);
    assert.match(repairs[0].what, /^bridge kni0 set down behind kni's back$/);
    assert.match(repairs[1].what, /^gateway 10\.71\.0\.1\/24 is missing from kni0; gateway fd00:71::1\/64 is missing from kni0$/);
    assert.match(repairs[5].what, /the masquerade table inet kni-masquerade is missing/);
    assert.ok(Date.parse(repairs[0].time) <= Date.parse(repairs[5].time));
    const text = knictl('--socket', d.socket, 'node').stdout;
    assert.match(text, /put back lately \(found undone on the node\):\n- \S+  bridge kni0 set down behind kni's back\n/);
  });
});
