// VM sandboxes (Kata and other VMMs) through the same attach path as containers.
import assert from 'node:assert/strict';
import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../plugin/server/protos';
import { rejectsWith } from './helpers/expect';
import { cni } from './helpers/cni-exec';
import { inNetns, netnsLinks, ping, RUN } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';
import * as grpc from '@grpc/grpc-js';

const NETWORKS = 'k8s.v1.cni.cncf.io/networks';


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
  // A secondary network (Debian's bridge plugin) a VM pod selects: its interface gets a tap too.
  const netsDir = `/tmp/${RUN}-vmnets`;
  before(async () => {
    fs.mkdirSync(netsDir, { recursive: true });
    fs.writeFileSync(`${netsDir}/vm-sec.conf`, JSON.stringify({ cniVersion: '1.0.0', name: 'vm-sec', type: 'bridge', bridge: `${RUN.slice(0, 9)}vs`, ipam: { type: 'host-local', ranges: [[{ subnet: '10.96.0.0/24' }]] } }));
    d = await TestDaemon.start({ vmTap: true, runtimeHandlers: { 'my-vmm': 'vm' }, bridge: 'knivm', ranges: ['10.95.0.0/24'], networks: { dir: netsDir }, defaultNetwork: { binDirs: ['/usr/lib/cni'] } });
  });
  after(() => {
    guest?.kill('SIGKILL');
    d?.cleanup();
    fs.rmSync(netsDir, { recursive: true, force: true });
  });

  /** A guest on `tap` answering ARP and ping for ip as mac, from inside the VM sandbox's netns. */
  async function startGuest(netns: string, tap: string, ip: string, mac: string): Promise<() => string> {
    guest = spawn('nsenter', [`--net=${netns}`, process.execPath, path.join(packageRoot(), 'dist/test/helpers/tap-guest.js'), tap, ip, mac], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    await new Promise<void>((resolve, reject) => {
      guest!.stdout!.on('data', (b) => {
        out += b;
        if (out.includes('ready')) resolve();
      });
      guest!.once('exit', (c) => reject(new Error(`tap guest exited with ${c}`)));
    });
    return () => out;
  }

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

    const out = await startGuest(vmNetns, itf.vm_tap, ip, itf.mac);
    // The unanswered ping left an ARP entry that would fail (and drop) the next packet: start over.
    inNetns(other, 'ip', ['neigh', 'flush', 'dev', 'eth0']);
    assert.ok(ping(other, ip), 'no echo reply from the guest');
    await waitFor(() => /icmp 1/.test(out()), 20_000, () => `the guest did not see the echo request: ${out()}`);
    guest!.kill('SIGKILL');
    guest = undefined;

    await d.rt().Detach({ sandbox_id: 'vm-a' });
    assert.deepEqual(netnsLinks(vmNetns), ['lo'], 'tap or veth left behind');
    assert.equal(d.nodeLinks().filter((l) => /^kni[0-9a-f]{12}$/.test(l)).length, 1);
    await d.rt().Detach({ sandbox_id: 'ct-b' });
  });

  it('every interface of a vm sandbox gets its tap, whatever network wires it: a selected network\'s net1 gets tap1_kni, a guest answers on it, and each goes with its interface', async () => {
    const vmNetns = d.makePodNetns('vm-n');
    const vm = await d.rt().Attach({ sandbox_id: 'vm-n', netns_path: vmNetns, runtime_handler: 'my-vmm', annotations: { [NETWORKS]: 'vm-sec' } });
    const ctNetns = d.makePodNetns('ct-n');
    await d.rt().Attach({ sandbox_id: 'ct-n', netns_path: ctNetns, annotations: { [NETWORKS]: 'vm-sec' } });
    try {
      assert.deepEqual(vm.interfaces.map((i: any) => [i.name, i.vm_tap]), [['eth0', 'tap0_kni'], ['net1', 'tap1_kni']]);
      assert.deepEqual(netnsLinks(vmNetns).sort(), ['eth0', 'lo', 'net1', 'tap0_kni', 'tap1_kni']);
      assert.deepEqual(netnsLinks(ctNetns).sort(), ['eth0', 'lo', 'net1']);
      const net1 = vm.interfaces[1];
      const ip = net1.addresses[0].address;
      assert.match(ip, /^10\.96\.0\./);
      // The bridge plugin's veth end redirects to the tap: the pod's kernel does not answer.
      assert.equal(ping(ctNetns, ip), false, 'the pod kernel answered: frames did not go to tap1_kni');
      const out = await startGuest(vmNetns, 'tap1_kni', ip, net1.mac);
      inNetns(ctNetns, 'ip', ['neigh', 'flush', 'dev', 'net1']);
      assert.ok(ping(ctNetns, ip), 'no echo reply from the guest on tap1_kni');
      await waitFor(() => /icmp 1/.test(out()), 20_000, () => `the guest did not see the echo request: ${out()}`);
      guest!.kill('SIGKILL');
      guest = undefined;
      // A network added to the running VM takes the next tap; removed, its tap goes with it.
      const more = await d.rt().AttachNetwork({ sandbox_id: 'vm-n', network: 'vm-sec', interface_name: 'net2' });
      assert.equal(more.interfaces.find((i: any) => i.name === 'net2').vm_tap, 'tap2_kni');
      await d.rt().DetachNetwork({ sandbox_id: 'vm-n', interface_name: 'net1' });
      assert.deepEqual(netnsLinks(vmNetns).sort(), ['eth0', 'lo', 'net2', 'tap0_kni', 'tap2_kni']);
      await d.rt().Detach({ sandbox_id: 'vm-n' });
      assert.deepEqual(netnsLinks(vmNetns), ['lo'], 'a tap or an interface left behind');
    } finally {
      await d.rt().Detach({ sandbox_id: 'ct-n' });
    }
  });

  it("a tap deleted or set down behind kni's back: Check names it, reconcile puts it back, and a guest answers on the tap made again", async () => {
    const vmNetns = d.makePodNetns('vm-r');
    const vm = await d.rt().Attach({ sandbox_id: 'vm-r', netns_path: vmNetns, runtime_handler: 'my-vmm', annotations: { [NETWORKS]: 'vm-sec' } });
    const other = d.makePodNetns('ct-r');
    await d.rt().Attach({ sandbox_id: 'ct-r', netns_path: other });
    try {
      assert.ok(inNetns(vmNetns, 'ip', ['link', 'del', 'tap0_kni']).ok);
      assert.ok(inNetns(vmNetns, 'ip', ['link', 'set', 'tap1_kni', 'down']).ok);
      assert.deepEqual((await d.rt().Check({ sandbox_id: 'vm-r' })).problems, ["tap0_kni, the VM's tap of eth0, is missing", "tap1_kni, the VM's tap of net1, is down"]);
      const findings = (await d.rt().Reconcile({})).findings.join('\n');
      assert.match(findings, /sandbox vm-r: tap0_kni, the VM's tap of eth0, is missing; made again \(a VMM that had it open keeps the deleted one: restart the VM\)/);
      assert.match(findings, /sandbox vm-r: tap1_kni, the VM's tap of net1, is down; set up again/);
      assert.deepEqual((await d.rt().Check({ sandbox_id: 'vm-r' })).problems, []);
      assert.deepEqual((await d.rt().Reconcile({})).findings, []);
      assert.deepEqual(netnsLinks(vmNetns).sort(), ['eth0', 'lo', 'net1', 'tap0_kni', 'tap1_kni']);
      // The redirects came back with the tap: eth0's frames go to it, and the guest's come out.
      const ip = vm.interfaces[0].addresses[0].address;
      assert.equal(ping(other, ip), false, 'the pod kernel answered: frames did not go to the tap made again');
      const out = await startGuest(vmNetns, 'tap0_kni', ip, vm.interfaces[0].mac);
      inNetns(other, 'ip', ['neigh', 'flush', 'dev', 'eth0']);
      assert.ok(ping(other, ip), 'no echo reply from the guest on the tap made again');
      await waitFor(() => /icmp 1/.test(out()), 20_000, () => `the guest did not see the echo request: ${out()}`);
      guest!.kill('SIGKILL');
      guest = undefined;
      // The interface gone with its tap: no tap is made for nothing, and the finding says why.
      for (const l of ['tap1_kni', 'net1']) assert.ok(inNetns(vmNetns, 'ip', ['link', 'del', l]).ok);
      assert.match((await d.rt().Reconcile({})).findings.join('\n'), /sandbox vm-r: cannot put the VM's tap tap1_kni of net1 back: its interface net1 is missing too/);
      assert.deepEqual(netnsLinks(vmNetns).sort(), ['eth0', 'lo', 'tap0_kni']);
    } finally {
      await d.rt().Detach({ sandbox_id: 'vm-r' });
      await d.rt().Detach({ sandbox_id: 'ct-r' });
    }
    assert.deepEqual(netnsLinks(vmNetns), ['lo']);
  });

  it('a vm sandbox selecting two networks at start gets a tap for each, in order', async () => {
    const netns = d.makePodNetns('vm-two');
    const vm = await d.rt().Attach({ sandbox_id: 'vm-two', netns_path: netns, runtime_handler: 'my-vmm', annotations: { [NETWORKS]: 'vm-sec, vm-sec' } });
    assert.deepEqual(vm.interfaces.map((i: any) => [i.name, i.vm_tap]), [['eth0', 'tap0_kni'], ['net1', 'tap1_kni'], ['net2', 'tap2_kni']]);
    assert.deepEqual(netnsLinks(netns).sort(), ['eth0', 'lo', 'net1', 'net2', 'tap0_kni', 'tap1_kni', 'tap2_kni']);
    await d.rt().Detach({ sandbox_id: 'vm-two' });
    assert.deepEqual(netnsLinks(netns), ['lo']);
  });

  it('a container sandbox on the same node gets no tap', async () => {
    const netns = d.makePodNetns('ct-c');
    const p = await d.rt().Attach({ sandbox_id: 'ct-c', netns_path: netns });
    assert.equal(p.kind, 'container');
    assert.deepEqual(netnsLinks(netns).sort(), ['eth0', 'lo']);
    await d.rt().Detach({ sandbox_id: 'ct-c' });
  });
});
