// The DNS settings a CNI network's plugins return (the result's `dns`): kept on the interface's
// record and reported in the Pod's network-status, as Multus reports them; a plugin's malformed
// entries are left out without failing the attach.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { dnsOf, fillFromResult } from '../plugin/core/cni-backend';
import type { NetworkRuntime } from '../plugin/core/network-runtime';
import { networkStatus } from '../plugin/kube/pod-networks';
import type { InterfaceRecord, SandboxRecord } from '../plugin/store/records';

const rt = { defaultBackend: { name: 'kni' } } as unknown as NetworkRuntime;
const net1 = (): InterfaceRecord => ({ name: 'net1', hostVeth: '', mac: '', mtu: 0, addresses: [], network: 'default/bridge-net', backend: 'cni', cniName: 'bridge-net' });
const result = (dns?: unknown) => ({
  cniVersion: '1.0.0',
  interfaces: [{ name: 'br9host' }, { name: 'net1', mac: '0a:58:0a:5c:00:05', sandbox: '/run/netns/p' }],
  ips: [{ address: '10.92.0.5/24', gateway: '10.92.0.1', interface: 1 }],
  ...(dns === undefined ? {} : { dns }),
});

describe('network-status dns (a CNI network\'s result)', () => {
  it('the result\'s dns is kept on the interface and reported; without one network-status has an empty dns, as Multus writes it', () => {
    const itf = net1();
    fillFromResult(itf, result({ nameservers: ['10.92.0.53', 'fd00:92::53'], domain: 'team.example', search: ['team.example', 'example'], options: ['ndots:2'] }), 'bridge-net');
    assert.deepEqual(itf.dns, { nameservers: ['10.92.0.53', 'fd00:92::53'], domain: 'team.example', search: ['team.example', 'example'], options: ['ndots:2'] });
    const [status] = networkStatus(rt, { id: 'sb', interfaces: [itf] } as unknown as SandboxRecord);
    assert.deepEqual(status.dns, itf.dns);
    assert.deepEqual(status.ips, ['10.92.0.5']);
    // The record is learnt again from a later result (a CNI network's ADD after a restart): no dns, none kept.
    fillFromResult(itf, result(), 'bridge-net');
    assert.equal('dns' in itf, false);
    assert.deepEqual(networkStatus(rt, { id: 'sb', interfaces: [itf] } as unknown as SandboxRecord)[0].dns, {});
  });

  it('a plugin\'s malformed dns entries are left out; the rest stays, and an empty dns is none', () => {
    assert.deepEqual(dnsOf({ nameservers: ['10.0.0.53', 53, '', 'x'.repeat(254), null], domain: 7, search: 'not-a-list', options: [['ndots:1']] }), { nameservers: ['10.0.0.53'] });
    assert.deepEqual(dnsOf({ nameservers: Array.from({ length: 40 }, (_, i) => `10.0.0.${i}`) })!.nameservers!.length, 32);
    for (const none of [undefined, null, 'dns', 3, [], {}, { nameservers: [] }, { domain: '' }]) assert.equal(dnsOf(none), undefined, JSON.stringify(none));
  });

  it('whatever a plugin prints as dns, kni keeps only lists of at most 32 texts of 1–253 characters, and never throws', () => {
    fc.assert(fc.property(fc.anything(), (raw) => {
      const dns = dnsOf(raw);
      if (!dns) return;
      assert.ok(Object.keys(dns).length > 0);
      for (const [k, v] of Object.entries(dns)) {
        const texts = k === 'domain' ? [v] : v;
        assert.ok(Array.isArray(texts) && texts.length >= 1 && texts.length <= 32, k);
        for (const t of texts) assert.ok(typeof t === 'string' && t.length >= 1 && t.length <= 253, k);
      }
    }), { numRuns: 500 });
  });
});
