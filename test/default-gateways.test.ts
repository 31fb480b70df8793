// Which interface a pod's default routes go through, as GetPod's routes, kni-cni's result and
// the Pod's network-status report it: the default network's gateways, a selection's
// default-route taking the families it names, and records written before the gateways were kept.
import assert from 'node:assert/strict';
import { defaultGateways } from '../plugin/core/network-backend';
import type { NetworkRuntime } from '../plugin/core/network-runtime';
import { podRoutes } from '../plugin/core/sandbox-check';
import { networkStatus } from '../plugin/kube/pod-networks';
import { cniResult } from '../runtime-hooks/cni/cni-result';
import type { InterfaceRecord, SandboxRecord } from '../plugin/store/records';

const eth0 = (): InterfaceRecord => ({
  name: 'eth0', hostVeth: 'kni0123456789ab', mac: '0a:58:0a:f4:00:02', mtu: 1500,
  addresses: [
    { family: 4, address: '10.244.0.2', prefixLength: 24, gateway: '10.244.0.1', range: '10.244.0.0/24' },
    { family: 6, address: 'fd00:10:244::2', prefixLength: 64, gateway: 'fd00:10:244::1', range: 'fd00:10:244::/64' },
  ],
});
const net1 = (extra: Partial<InterfaceRecord> = {}): InterfaceRecord => ({
  name: 'net1', hostVeth: '', mac: '0a:58:0a:5b:00:05', mtu: 1500, network: 'team/macvlan-hl', backend: 'cni', selectedBy: 'annotation',
  addresses: [{ family: 4, address: '10.91.0.5', prefixLength: 24, gateway: '10.91.0.1', range: 'cni:macvlan-hl' }],
  ...extra,
});
const record = (interfaces: InterfaceRecord[]): SandboxRecord => ({ id: 'sb', interfaces } as unknown as SandboxRecord);
const rt = { defaultBackend: { name: 'kni' } } as unknown as NetworkRuntime;
const defaults = (rec: SandboxRecord) => podRoutes(rec).filter((r) => r.gateway).map((r) => `${r.destination} via ${r.gateway} dev ${r.interface}`);

describe('the pod\'s default routes (GetPod routes, network-status gateway)', () => {
  it('the default network\'s interface carries both families; a secondary none', () => {
    const rec = record([eth0(), net1()]);
    assert.deepEqual(defaults(rec), ['0.0.0.0/0 via 10.244.0.1 dev eth0', '::/0 via fd00:10:244::1 dev eth0']);
    const [a, b] = networkStatus(rt, rec);
    assert.deepEqual([a.default, a.gateway], [true, ['10.244.0.1', 'fd00:10:244::1']]);
    assert.deepEqual([b.default, 'gateway' in b], [undefined, false]);
  });

  it('a selection\'s default-route takes the families it names; the default network\'s interface keeps the others', () => {
    const rec = record([eth0(), net1({ defaultRoute: true, defaultGateways: ['10.91.0.254'] })]);
    rec.interfaces[0].defaultRoute = false;
    assert.deepEqual(defaults(rec), ['::/0 via fd00:10:244::1 dev eth0', '0.0.0.0/0 via 10.91.0.254 dev net1']);
    const [a, b] = networkStatus(rt, rec);
    assert.deepEqual([a.default, a.gateway], [undefined, ['fd00:10:244::1']]);
    assert.deepEqual([b.default, b.gateway], [true, ['10.91.0.254']]);
    // kni-cni's result, which has the default network's interface only, says the same.
    assert.deepEqual(cniResult('1.1.0', rec).routes, [{ dst: '::/0', gw: 'fd00:10:244::1' }]);
  });

  it('a record from before the gateways were kept: the selection\'s interface has its addresses\' gateways, as before', () => {
    const rec = record([eth0(), net1({ defaultRoute: true })]);
    rec.interfaces[0].defaultRoute = false;
    assert.deepEqual(defaultGateways(rec, rec.interfaces[0]), []);
    assert.deepEqual(defaultGateways(rec, rec.interfaces[1]), ['10.91.0.1']);
  });
});
