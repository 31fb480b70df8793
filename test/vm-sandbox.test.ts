// VM sandboxes (Kata and other VMMs) through the same attach path as containers.
import assert from 'node:assert/strict';
import { ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { packageRoot } from '../plugin/server/protos';
import { rejectsWith } from './helpers/expect';
import { cni } from './helpers/cni-exec';
import { inNetns, netnsLinks, ping } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';
import * as grpc from '@grpc/grpc-js';


describe('VM sandboxes: Kata-compatible by default', () => {
  let d: TestDaemon;
  before(async () => {
    d = await TestDaemon.start();
  });
  after(() => d?.cleanup());

  it('a kata sandbox gets exactly what Kata scans: lo and a veth with addresses and routes, nothing else', async () => {
    const netns = d.makePodNetns('kata-a');
    const p = await d.rt().Attach({ sandbox_id: 'kata-a', netns_path: netns, runtime_handler: 'kata' });
    assert.equal(p.kind, 'vm');
    assert.equal(p.interfaces[0].vm_tap, '');
    assert.deepEqual(netnsLinks(netns).sort(), ['eth0', 'lo']);
    assert.match(inNetns(netns, 'ip', ['-d', 'link', 'show', 'eth0']).out, /veth/);
    const addrs = inNetns(netns, 'ip', ['-o', 'addr', 'show', 'dev', 'eth0']).out;
    for (const a of p.interfaces[0].addresses) assert.ok(addrs.includes(`${a.address}/${a.prefix_length}`), `${a.address} missing`);
    assert.match(inNetns(netns, 'ip', ['route']).out, /default via 10\.244\.0\.1 dev eth0/);
    assert.match(inNetns(netns, 'ip', ['-6', 'route']).out, /default via fd00:10:244::1 dev eth0/);
    assert.doesNotMatch(inNetns(netns, 'tc', ['qdisc', 'show', 'dev', 'eth0']).out, /ingress/);
    await d.rt().Detach({ sandbox_id: 'kata-a' });
    assert.deepEqual(netnsLinks(netns), ['lo']);
  });

  it('one decision for every entry point: handler map, or pod annotations on the CNI path', async () => {
    const conf = (ann: Record<string, string>) => ({ cniVersion: '1.0.0', name: 'kni', socket: d.cniSocket, runtimeConfig: { 'io.kubernetes.cri.pod-annotations': ann } });
    const env = (id: string) => ({ CNI_CONTAINERID: id, CNI_NETNS: d.makePodNetns(id), CNI_IFNAME: 'eth0', CNI_ARGS: '' });
    for (const [id, ann, kind] of [
      ['cni-kata', { 'kni.dev/runtime-handler': 'kata-qemu' }, 'vm'],
      ['cni-explicit', { 'kni.dev/sandbox-kind': 'vm' }, 'vm'],
      ['cni-runc', { 'kni.dev/runtime-handler': 'runc' }, 'container'],
      ['cni-plain', {}, 'container'],
    ] as const) {
      const e = env(id);
      const r = cni('ADD', e, conf(ann));
      assert.equal(r.code, 0, r.raw);
      assert.equal((await d.rt().GetPod({ sandbox_id: id })).kind, kind, id);
      cni('DEL', e, conf(ann));
    }
    const bad = cni('ADD', env('cni-bad'), conf({ 'kni.dev/sandbox-kind': 'vmm' }));
    assert.equal(bad.out.code, 4);
    assert.match(bad.out.msg, /kni\.dev\/sandbox-kind must be vm or container/);
    await rejectsWith(d.rt().Attach({ sandbox_id: 'k2', netns_path: d.makePodNetns('k2'), annotations: { 'kni.dev/sandbox-kind': 'x' } }), grpc.status.INVALID_ARGUMENT, /must be vm or container/);
  });
});

describe('VM sandboxes: vmTap for other VMMs', () => {
  let d: TestDaemon;
  let guest: ChildProcess | undefined;
  before(async () => {
    d = await TestDaemon.start({ vmTap: true, runtimeHandlers: { 'my-vmm': 'vm' }, bridge: 'knivm', ranges: ['10.95.0.0/24'] });
  });
  after(() => {
    guest?.kill('SIGKILL');
    d?.cleanup();
  });

  it('reports what a VMM needs, and packets flow through the tap to a guest and back', async () => {
    const vmNetns = d.makePodNetns('vm-a');
    const vm = await d.rt().Attach({ sandbox_id: 'vm-a', netns_path: vmNetns, runtime_handler: 'my-vmm' });
    const other = d.makePodNetns('ct-b');
    await d.rt().Attach({ sandbox_id: 'ct-b', netns_path: other, runtime_handler: 'runc' });
    const itf = vm.interfaces[0];
    assert.equal(vm.kind, 'vm');
    assert.equal(itf.vm_tap, 'tap0_kni');
    assert.equal(itf.mtu, 1500);
    assert.match(itf.mac, /^0a:58:0a:5f:00:/);
    assert.equal(itf.addresses[0].gateway, '10.95.0.1');
    assert.ok(vm.routes.some((r: any) => r.destination === '0.0.0.0/0'));
    assert.deepEqual(netnsLinks(vmNetns).sort(), ['eth0', 'lo', 'tap0_kni']);
    const ip = itf.addresses[0].address;

    // No guest yet: the veth's ingress goes to the tap, so the pod's kernel does not answer.
    assert.equal(ping(other, ip), false, 'the pod kernel answered: frames did not go to the tap');

    guest = spawn('nsenter', [`--net=${vmNetns}`, process.execPath, path.join(packageRoot(), 'dist/test/helpers/tap-guest.js'), itf.vm_tap, ip, itf.mac], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    await new Promise<void>((resolve, reject) => {
      guest!.stdout!.on('data', (b) => {
        out += b;
        if (out.includes('ready')) resolve();
      });
      guest!.once('exit', (c) => reject(new Error(`tap guest exited with ${c}`)));
    });
    // The unanswered ping left an ARP entry that would fail (and drop) the next packet: start over.
    inNetns(other, 'ip', ['neigh', 'flush', 'dev', 'eth0']);
    assert.ok(ping(other, ip), 'no echo reply from the guest');
    await waitFor(() => /icmp 1/.test(out), 20_000, () => `the guest did not see the echo request: ${out}`);
    guest.kill('SIGKILL');
    guest = undefined;

    await d.rt().Detach({ sandbox_id: 'vm-a' });
    assert.deepEqual(netnsLinks(vmNetns), ['lo'], 'tap or veth left behind');
    assert.equal(d.nodeLinks().filter((l) => /^kni[0-9a-f]{12}$/.test(l)).length, 1);
    await d.rt().Detach({ sandbox_id: 'ct-b' });
  });

  it('a container sandbox on the same node gets no tap', async () => {
    const netns = d.makePodNetns('ct-c');
    const p = await d.rt().Attach({ sandbox_id: 'ct-c', netns_path: netns });
    assert.equal(p.kind, 'container');
    assert.deepEqual(netnsLinks(netns).sort(), ['eth0', 'lo']);
    await d.rt().Detach({ sandbox_id: 'ct-c' });
  });
});
