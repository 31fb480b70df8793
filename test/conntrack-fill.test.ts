// A connection tracking table filling up on the node: kni warns in GetNode (knictl node) from
// 90 % on until it is under 80 % again, and its metrics give the count and the limit. Real
// kernel: entries made in the test node's netns (UDP datagrams to as many loopback ports, each
// an entry for 30 s), the limit (a global sysctl, read by every netns) lowered to put them at
// 93 % and 85 %, and put back at once; the node's entries are thousands, the host's own far fewer.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { Client } from '../plugin/client/clients';
import { conntrackWarning } from '../plugin/node/conntrack-fill';
import { inNetns } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

const MAX = '/proc/sys/net/netfilter/nf_conntrack_max';

describe('a connection tracking table filling up (real kernel)', () => {
  let d: TestDaemon;
  let rt: Client;
  // Reconcile only when asked: the checks below read what the last one found.
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.72.0.0/24'], reconcileSeconds: 3600 }, { args: ['--metrics-addr', '127.0.0.1:9273'] });
    rt = d.rt();
  });
  after(() => d?.cleanup());

  const warnings = async (): Promise<string[]> => ((await rt.GetNode({})).warnings as string[]).filter((w) => /connection tracking/.test(w));
  const inNode = (cmd: string, args: string[]): string => {
    const r = inNetns(d.nodeNetns, cmd, args);
    assert.ok(r.ok, `${cmd} ${args.join(' ')}: ${r.out}`);
    return r.out;
  };

  it('warned from 90 % full, still at 85 %, not once the limit is back; the metric gives the count and the limit', async () => {
    await rt.Reconcile({});
    assert.deepEqual(await warnings(), []);
    const send = "const s = require('dgram').createSocket('udp4'); let n = 0; const next = () => (n === 3000 ? s.close() : s.send('x', 20000 + n++, '127.0.0.1', next)); next();";
    inNode(process.execPath, ['-e', send]);
    const count = Number(inNode('cat', ['/proc/sys/net/netfilter/nf_conntrack_count']));
    assert.ok(count >= 3000, `${count} conntrack entries in the node netns`);
    const saved = fs.readFileSync(MAX, 'utf8').trim();
    const setMax = (share: number): number => {
      const max = Math.ceil(count / share);
      fs.writeFileSync(MAX, String(max));
      return max;
    };
    try {
      const max = setMax(0.93);
      await rt.Reconcile({});
      const [w] = await warnings();
      assert.equal(w, `the connection tracking table is 90% full or more (of its ${max} entries; kni_conntrack_entries has the count): once full, the kernel drops every new connection through this node, pods' and Services' alike ("nf_conntrack: table full" in its log); raise net.netfilter.nf_conntrack_max (kube-proxy's conntrack.maxPerCore sets it) or find what opens so many (conntrack -S, conntrack -L)`);
      const metrics = inNode('curl', ['-s', '-m', '5', 'http://127.0.0.1:9273/metrics']);
      assert.match(metrics, new RegExp(`^kni_conntrack_entries\\{state="max"\\} ${max}$`, 'm'));
      assert.ok(Number(/^kni_conntrack_entries\{state="in_use"\} (\d+)$/m.exec(metrics)?.[1]) >= 3000, metrics);
      // Under 90 % but not under 80 %: still warned (no warning coming and going at the edge).
      setMax(0.85);
      await rt.Reconcile({});
      assert.equal((await warnings()).length, 1);
    } finally {
      fs.writeFileSync(MAX, saved);
    }
    await rt.Reconcile({});
    assert.deepEqual(await warnings(), []);
  });

  it('the warning\'s share in steps of 5 %, "full" at the limit; none without conntrack', () => {
    const text = (entries: number, warned = false) => conntrackWarning({ entries, max: 1000 }, warned)?.replace(/ \(of its.*/s, '');
    assert.equal(text(899), undefined);
    assert.equal(text(900), 'the connection tracking table is 90% full or more');
    assert.equal(text(949), 'the connection tracking table is 90% full or more');
    assert.equal(text(950), 'the connection tracking table is 95% full or more');
    assert.equal(text(1000), 'the connection tracking table is full');
    assert.equal(text(850, true), 'the connection tracking table is 85% full or more');
    assert.equal(text(799, true), undefined);
    assert.equal(conntrackWarning(undefined, true), undefined);
    assert.equal(conntrackWarning({ entries: 5, max: 0 }, false), undefined);
  });
});
