// Contract test of containerd's PodNetworkLifecycle service, with a client from our proto.
import * as grpc from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { loadProto } from '../plugin/server/protos';
import { rejectsWith } from './helpers/expect';
import { inNetns, ping } from './helpers/sh';
import { stateRecords } from './helpers/state-records';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

describe('containerd PodNetworkLifecycle', () => {
  let d: TestDaemon;
  let client: any;
  const call = (m: string, req: object): Promise<any> =>
    new Promise((resolve, reject) => client[m](req, { deadline: Date.now() + 10_000 }, (e: Error | null, r: unknown) => (e ? reject(e) : resolve(r))));

  before(async () => {
    d = await TestDaemon.start();
    const pkg = loadProto('containerd/networking_v1.proto') as any;
    client = new pkg.containerd.services.networking.v1.PodNetworkLifecycle(`unix://${d.socket}`, grpc.credentials.createInsecure());
  });
  after(() => {
    client?.close();
    d?.cleanup();
  });

  it('CheckHealth is ready once the node network is', async () => {
    assert.deepEqual(await call('CheckHealth', {}), { ready: true, message: 'ready' });
  });

  it('Setup wires the containerd-made netns and answers interfaces, routes and DNS; Teardown releases', async () => {
    const netns = d.makePodNetns('pnl');
    const dns = { servers: ['10.96.0.10'], searches: ['default.svc.cluster.local'], options: ['ndots:5'] };
    const res = await call('SetupPodNetwork', {
      sandbox_id: 'pnl-1', netns_path: netns, pod_name: 'api', pod_namespace: 'prod', pod_uid: 'U-1',
      labels: { app: 'api' }, annotations: { a: 'b' }, dns_config: dns, cgroup_parent: '/kubepods',
      port_mappings: [{ protocol: 'tcp', container_port: 8080, host_port: 0, host_ip: '' }],
    });
    assert.equal(res.interfaces.length, 1);
    const eth0 = res.interfaces[0];
    assert.equal(eth0.name, 'eth0');
    assert.equal(eth0.type, 'NETDEV');
    assert.equal(eth0.state, 'UP');
    assert.equal(eth0.mtu, 1500);
    assert.match(eth0.mac_address, /^0a:58:/);
    assert.match(eth0.addresses[0], /^10\.244\.0\.\d+\/32$/);
    assert.match(eth0.addresses[1], /^fd00:10:244::[0-9a-f]+\/128$/);
    assert.deepEqual(res.routes.filter((r: any) => r.destination === 'default').map((r: any) => r.gateway), ['10.244.0.1', 'fd00:10:244::1']);
    assert.deepEqual(res.dns, dns);
    assert.equal(stateRecords(d.stateDir, 'sandboxes').get('pnl-1')?.cgroupParent, '/kubepods', 'the cgroup parent is not kept for CNI plugins (cgroupPath)');
    assert.ok(ping(netns, '10.244.0.1'));
    const again = await call('SetupPodNetwork', { sandbox_id: 'pnl-1', netns_path: netns, pod_name: 'api', pod_namespace: 'prod' });
    assert.deepEqual(again.interfaces, res.interfaces);

    await call('TeardownPodNetwork', { sandbox_id: 'pnl-1', netns_path: netns });
    // containerd removes the netns after a teardown: kni answers before the kernel's veth
    // delete, which follows within moments (batched).
    await waitFor(() => !/eth0/.test(inNetns(netns, 'ip', ['-o', 'link']).out), 10_000, () => inNetns(netns, 'ip', ['-o', 'link']).out);
    await call('TeardownPodNetwork', { sandbox_id: 'pnl-1', netns_path: '' }); // again, netns gone: fine
    assert.equal((await d.rt().GetIPAMStatus()).ranges[0].used, '0');
  });

  it('answers precise errors', async () => {
    await rejectsWith(call('SetupPodNetwork', { sandbox_id: '', netns_path: '/run/netns/x' }), grpc.status.INVALID_ARGUMENT, /sandbox id is empty/);
    await rejectsWith(call('SetupPodNetwork', { sandbox_id: 'x', netns_path: '/etc/hostname' }), grpc.status.INVALID_ARGUMENT, /outside the allowed netns roots/);
    await rejectsWith(call('TeardownPodNetwork', { sandbox_id: 'a/b' }), grpc.status.INVALID_ARGUMENT, /has characters/);
  });
});
