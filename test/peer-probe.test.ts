// kni's probe of other nodes' pod networks (plugin/node/peer-probe.ts), on loopback: a kni
// listening answers, an address nobody listens on resets (the path works), the results kept per
// destination, dropped with it, and the log says when one stops answering. Through real routes,
// and a vxlan port blocked between two nodes: cluster/node-agent.cluster.ts.
import assert from 'node:assert/strict';
import { PeerProbe } from '../plugin/node/peer-probe';

describe('peer probe (loopback)', () => {
  const port = 20000 + (process.pid % 20000);
  let probe: PeerProbe | undefined;
  afterEach(() => probe?.stop());

  it('answers where a kni listens, refused where none does; a target no longer probed loses its result', async () => {
    probe = new PeerProbe(() => ({ port, intervalSeconds: 30, timeoutSeconds: 2 }), 'kni test\n');
    probe.listen(['127.0.0.1']);
    await new Promise((r) => setTimeout(r, 100));
    await probe.probeAll([
      { destination: '10.0.1.0/24', address: '127.0.0.1', source: '127.0.0.1' },
      { destination: '10.0.2.0/24', address: '127.0.0.2', source: '127.0.0.1' },
    ]);
    const a = probe.result('10.0.1.0/24')!;
    assert.equal(a.state, 'answers');
    assert.ok(a.ms >= 0 && a.ms < 2000, String(a.ms));
    assert.ok(Date.parse(a.since) <= Date.now());
    assert.deepEqual([probe.result('10.0.2.0/24')?.state, probe.result('10.0.2.0/24')?.detail], ['refused', '']);
    // The same outcome again keeps its "since".
    await probe.probeAll([{ destination: '10.0.1.0/24', address: '127.0.0.1', source: '127.0.0.1' }]);
    assert.equal(probe.result('10.0.1.0/24')!.since, a.since);
    assert.equal(probe.result('10.0.2.0/24'), undefined);
  });

  it('listening on an address the node does not have is retried, not fatal; port 0 probes nothing', async () => {
    probe = new PeerProbe(() => ({ port: 0, intervalSeconds: 30, timeoutSeconds: 2 }), '');
    let asked = 0;
    probe.start(() => ['127.0.0.1'], () => (asked++, []));
    assert.equal(asked, 0, 'port 0: no round');
    probe.listen(['192.0.2.77']);
    await new Promise((r) => setTimeout(r, 100));
    probe.listen(['192.0.2.77']);
  });
});
