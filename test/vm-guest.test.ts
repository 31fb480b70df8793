// Real VMs behind kni: a QEMU guest (Debian's kernel, a busybox initramfs) per way a VMM meets
// kni's network, each pinging a runc pod and the node both ways over IPv4 and IPv6 and moving
// data over TCP both ways, then detached through kni with nothing left. Guests boot slowly under
// software emulation: one guest per mode, every check inside it.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { packageRoot } from '../plugin/server/protos';
import { knictl } from './helpers/knictl';
import { kataTap, KATA_TAP, scanNetns } from './helpers/kata-netns';
import { GuestNetwork, guestImage, QemuGuest } from './helpers/qemu-guest';
import { inNetns, netnsLinks, RUN, sh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

const TCP_BYTES = 256 * 1024;

/** A pod or the node answers (or reaches) address: pings until one answers, as neighbours settle. */
async function reaches(fromNetns: string, address: string): Promise<boolean> {
  return waitFor(() => inNetns(fromNetns, 'ping', ['-c', '1', '-W', '3', address]).ok, 30_000, () => '')
    .then(() => true)
    .catch(() => false);
}

/** Starts a TCP sink in a netns; resolves with a function awaiting the byte count it received. */
async function sinkIn(netns: string, port: number): Promise<() => Promise<number>> {
  const p = spawn('nsenter', [`--net=${netns}`, process.execPath, path.join(packageRoot(), 'dist/test/helpers/tcp-in-netns.js'), 'sink', String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  p.stdout!.on('data', (b) => (out += b));
  await waitFor(() => out.includes('listening') || p.exitCode !== null, 30_000, () => `the sink did not listen: ${out}`);
  return async () => {
    try {
      await waitFor(() => /received \d+/.test(out), 120_000, () => `the sink got no whole transfer: ${out}`);
      return Number(/received (\d+)/.exec(out)![1]);
    } finally {
      p.kill('SIGKILL');
    }
  };
}

interface Ends {
  guest: QemuGuest;
  /** The guest's addresses, IPv4 then IPv6. */
  guestIps: string[];
  pod: { netns: string; ips: string[] };
  node: { netns: string; ips: string[] };
}

/** Every check of a guest behind kni: pings both ways with the pod and the node, TCP both ways with the pod. */
async function exercise({ guest, guestIps, pod, node }: Ends): Promise<void> {
  for (const [i, family] of ['IPv4', 'IPv6'].entries()) {
    assert.ok(await guest.ping(pod.ips[i]), `the guest cannot ping the pod over ${family} (${pod.ips[i]}):\n${await guest.run('ip addr; ip route; ip -6 route; ip neigh; ip -6 neigh').then((r) => r.out)}`);
    assert.ok(await guest.ping(node.ips[i]), `the guest cannot ping the node over ${family} (${node.ips[i]})`);
    assert.ok(await reaches(pod.netns, guestIps[i]), `the pod cannot ping the guest over ${family} (${guestIps[i]})`);
    assert.ok(await reaches(node.netns, guestIps[i]), `the node cannot ping the guest over ${family} (${guestIps[i]})`);

    const received = await sinkIn(pod.netns, 7000 + i);
    await guest.must(`dd if=/dev/zero bs=1024 count=${TCP_BYTES / 1024} 2>/dev/null | nc ${pod.ips[i]} ${7000 + i}`);
    assert.equal(await received(), TCP_BYTES, `guest → pod over TCP (${family})`);

    await guest.must(`rm -f /tmp/in; (nc -l -p ${7100 + i} > /tmp/in &)`);
    const send = inNetns(pod.netns, process.execPath, [path.join(packageRoot(), 'dist/test/helpers/tcp-in-netns.js'), 'send', guestIps[i], String(7100 + i), String(TCP_BYTES)]);
    assert.ok(send.ok, `pod → guest over TCP (${family}): ${send.out}`);
    await waitFor(async () => (await guest.run('wc -c < /tmp/in')).out.trim() === String(TCP_BYTES), 60_000, () => `the guest did not get ${TCP_BYTES} bytes over ${family}`);
  }
}

/** A guest's configuration from kni's answer alone (GetPod), as the README tells a VMM to do. */
function fromGetPod(itf: any, routes: any[]): GuestNetwork {
  const own = routes.filter((r) => r.interface === itf.name);
  return {
    mac: itf.mac,
    mtu: itf.mtu,
    addresses: itf.addresses.map((a: any) => `${a.address}/${a.prefix_length}`),
    // Link routes first: a route through a gateway needs the way to it.
    routes: [...own.filter((r) => !r.gateway), ...own.filter((r) => r.gateway)].map((r) => ({ destination: r.destination, gateway: r.gateway || undefined })),
    neighbours: (itf.neighbors ?? []).map((n: any) => ({ address: n.address, mac: n.mac })),
  };
}

describe('Real VM guests behind kni (QEMU)', function () {
  this.timeout(900_000);
  let image: string;
  let d: TestDaemon | undefined;
  let guest: QemuGuest | undefined;
  before(() => {
    image = guestImage();
  });
  afterEach(async () => {
    await guest?.stop();
    guest = undefined;
    d?.cleanup();
    d = undefined;
  });

  /** A runc pod beside the VM, and the node's addresses (the bridge's gateways). */
  async function runcPod(daemon: TestDaemon): Promise<Ends['pod']> {
    const netns = daemon.makePodNetns('vm-peer');
    const p = await daemon.rt().Attach({ sandbox_id: 'vm-peer', netns_path: netns, runtime_handler: 'runc' });
    return { netns, ips: p.interfaces[0].addresses.map((a: any) => a.address) };
  }

  it("Kata's model: a tap joined to kni's veth by tc redirects, the guest configured from a scan of the netns; Check and Reconcile stay clean", async () => {
    d = await TestDaemon.start();
    const vmNetns = d.makePodNetns('vm-kata');
    const vm = await d.rt().Attach({ sandbox_id: 'vm-kata', netns_path: vmNetns, runtime_handler: 'kata' });
    const pod = await runcPod(d);
    // What Kata's runtime does in the netns: a tap, eth0 ⇄ tap redirects, a scan for the guest.
    const run = (cmd: string, args: string[]) => inNetns(vmNetns, cmd, args);
    kataTap(run, vm.interfaces[0].mtu);
    const net = scanNetns(run);
    assert.ok(net.neighbours.length === 2, `a routed pod's netns holds its gateways' MACs: ${JSON.stringify(net)}`);
    guest = await QemuGuest.boot(image, `${RUN}-vm-kata`, ['nsenter', `--net=${vmNetns}`], KATA_TAP, net.mac);
    await guest.configure(net);
    const node = { netns: d.nodeNetns, ips: vm.interfaces[0].addresses.map((a: any) => a.gateway) };
    await exercise({ guest, guestIps: net.addresses.map((a) => a.split('/')[0]), pod, node });
    assert.deepEqual((await d.rt().Check({ sandbox_id: 'vm-kata' })).problems, []);
    assert.deepEqual((await d.rt().Reconcile({})).findings, []);

    // Kata stops the VM and takes its tap away; kni's detach takes the rest.
    await guest.stop();
    guest = undefined;
    sh('ip', ['-n', path.basename(vmNetns), 'link', 'del', KATA_TAP]);
    await d.rt().Detach({ sandbox_id: 'vm-kata' });
    await d.rt().Detach({ sandbox_id: 'vm-peer' });
    assert.deepEqual(netnsLinks(vmNetns), ['lo']);
    assert.equal(inNetns(vmNetns, 'tc', ['qdisc', 'show', 'dev', 'lo']).out.includes('ingress'), false);
    assert.deepEqual(await d.kniVethsSettled(0), []);
    assert.deepEqual((await d.rt().GetIPAMStatus({})).ranges.map((r: any) => Number(r.used)), [0, 0], 'an address is still held');
  });

  for (const podLink of ['bridge', 'routed'] as const) {
    it(`vmTap on a ${podLink === 'bridge' ? 'bridged' : 'routed'} node: the guest configured from GetPod alone opens kni's tap${podLink === 'routed' ? "; it reaches its IPv6 gateway without the neighbours GetPod names (the host end answers NDP), and the node's arp_ignore=1 does not matter" : ''}`, async () => {
      d = await TestDaemon.start({ vmTap: true, podLink, runtimeHandlers: { 'my-vmm': 'vm', runc: 'container' } });
      // The node answers ARP only for addresses on the asking link: a routed guest must know its gateway's MAC.
      if (podLink === 'routed') sh('ip', ['netns', 'exec', d.nodeNetnsName, 'sysctl', '-q', '-w', 'net.ipv4.conf.all.arp_ignore=1']);
      const vmNetns = d.makePodNetns(`vm-${podLink}`);
      const vm = await d.rt().Attach({ sandbox_id: `vm-${podLink}`, netns_path: vmNetns, runtime_handler: 'my-vmm' });
      const pod = await runcPod(d);
      const itf = vm.interfaces[0];
      assert.equal(itf.vm_tap, 'tap0_kni');
      const net = fromGetPod(itf, vm.routes);
      if (podLink === 'routed') {
        assert.deepEqual(net.neighbours, itf.addresses.map((a: any) => ({ address: a.gateway, mac: 'ee:ee:ee:ee:ee:ee' })));
        const shown = knictl('--socket', d.socket, 'pod', `vm-${podLink}`).stdout;
        for (const a of itf.addresses) assert.ok(shown.includes(`  neighbour ${a.gateway} lladdr ee:ee:ee:ee:ee:ee (permanent)\n`), shown);
      } else assert.deepEqual(net.neighbours, []);
      guest = await QemuGuest.boot(image, `${RUN}-vm-${podLink}`, ['nsenter', `--net=${vmNetns}`], itf.vm_tap, itf.mac);
      await guest.configure(net);
      const node = { netns: d.nodeNetns, ips: itf.addresses.map((a: any) => a.gateway) };
      const guestIps = itf.addresses.map((a: any) => a.address);
      await exercise({ guest, guestIps, pod, node });
      if (podLink === 'routed') {
        const gw6 = itf.addresses[1].gateway;
        await guest.must(`ip -6 neigh del ${gw6} dev eth0`);
        assert.ok(await guest.ping(node.ips[1]), `without the gateway's MAC written ahead the guest cannot reach the node over IPv6:\n${(await guest.run('ip -6 neigh')).out}`);
        assert.match((await guest.run(`ip -6 neigh show ${gw6}`)).out, /lladdr ee:ee:ee:ee:ee:ee/);
      }
      assert.deepEqual((await d.rt().Check({ sandbox_id: `vm-${podLink}` })).problems, []);

      await guest.stop();
      guest = undefined;
      await d.rt().Detach({ sandbox_id: `vm-${podLink}` });
      await d.rt().Detach({ sandbox_id: 'vm-peer' });
      assert.deepEqual(netnsLinks(vmNetns), ['lo'], 'the tap or the veth was left behind');
      assert.deepEqual(await d.kniVethsSettled(0), []);
      assert.deepEqual((await d.rt().GetIPAMStatus({})).ranges.map((r: any) => Number(r.used)), [0, 0], 'an address is still held');
    });
  }
});
