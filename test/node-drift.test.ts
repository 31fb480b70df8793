// The node network changed behind kni's back — the bridge set down, its gateways flushed,
// forwarding turned off, the masquerade rules flushed — is found by reconcile, named, and set up
// again; an untouched node gives no finding at all.
import assert from 'node:assert/strict';
import { Client } from '../plugin/client/clients';
import { inNetns, sh } from './helpers/sh';
import { knictl } from './helpers/knictl';
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
  const masq = (tool: string) => inNetns(node(), tool, ['-t', 'nat', '-S', 'KNI-MASQ']).out.split('\n').filter((l) => l.startsWith('-A'));
  const postrouting = (tool: string) => inNetns(node(), tool, ['-t', 'nat', '-S', 'POSTROUTING']).out;

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

  it('forwarding turned off (both families): turned on again', async () => {
    inNode('sysctl', ['-qw', 'net.ipv4.ip_forward=0']);
    inNode('sysctl', ['-qw', 'net.ipv6.conf.all.forwarding=0']);
    assert.match(await reconcileFindings(), /net\.ipv4\.ip_forward is off; net\.ipv6\.conf\.all\.forwarding is off/);
    assert.equal(sysctl('net.ipv4.ip_forward'), '1');
    assert.equal(sysctl('net.ipv6.conf.all.forwarding'), '1');
  });

  it('the masquerade rules flushed or changed: written again', async () => {
    const want4 = masq('iptables');
    const want6 = masq('ip6tables');
    assert.deepEqual(want4, ['-A KNI-MASQ -d 224.0.0.0/4 -j RETURN', '-A KNI-MASQ -d 255.255.255.255/32 -j RETURN', '-A KNI-MASQ -d 10.71.0.0/24 -j RETURN', '-A KNI-MASQ -j MASQUERADE']);
    assert.equal(want6.length, 3);
    inNode('iptables', ['-t', 'nat', '-F', 'KNI-MASQ']);
    inNode('ip6tables', ['-t', 'nat', '-F', 'POSTROUTING']);
    const f = await reconcileFindings();
    assert.match(f, /IPv4 nat chain KNI-MASQ was changed \(0 rules; kni wrote 4\)/);
    assert.match(f, /the POSTROUTING rule sending fd00:71::\/64 to KNI-MASQ is missing/);
    assert.deepEqual(masq('iptables'), want4);
    assert.match(postrouting('ip6tables'), /-s fd00:71::\/64 .*-j KNI-MASQ/);
    // A rule slipped into kni's chain (it would exempt traffic from masquerading) is found too.
    inNode('iptables', ['-t', 'nat', '-I', 'KNI-MASQ', '-d', '192.0.2.0/24', '-j', 'RETURN']);
    assert.match(await reconcileFindings(), /IPv4 nat chain KNI-MASQ was changed \(5 rules; kni wrote 4\)/);
    assert.deepEqual(masq('iptables'), want4);
    // The whole chain gone (the jump rules with it, as `iptables -t nat -F; -X` leaves it).
    inNode('iptables', ['-t', 'nat', '-F']);
    inNode('iptables', ['-t', 'nat', '-X', 'KNI-MASQ']);
    assert.match(await reconcileFindings(), /IPv4 nat chain KNI-MASQ is missing; the POSTROUTING rule sending 10\.71\.0\.0\/24 to KNI-MASQ is missing/);
    assert.deepEqual(masq('iptables'), want4);
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
    assert.match(repairs[5].what, /IPv4 nat chain KNI-MASQ is missing/);
    assert.ok(Date.parse(repairs[0].time) <= Date.parse(repairs[5].time));
    const text = knictl('--socket', d.socket, 'node').stdout;
    assert.match(text, /put back lately \(found undone on the node\):\n- \S+  bridge kni0 set down behind kni's back\n/);
  });
});
