// Several networks per pod without Kubernetes: definitions from networks.dir (Debian's macvlan
// and bridge plugins with static and host-local IPAM; ipvlan only as a failure: this kernel is
// built without CONFIG_IPVLAN), selected by the pod's
// k8s.v1.cni.cncf.io/networks annotation or added and removed through AttachNetwork and
// DetachNetwork. The default network (eth0) comes first; a failure anywhere undoes every
// interface; a restart still releases with the config ADD ran with.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { Client } from '../plugin/client/clients';
import { cni } from './helpers/cni-exec';
import { rejectsWith } from './helpers/expect';
import { inNetns, netnsLinks, ping, RUN, sh, trySh } from './helpers/sh';
import { installTestPlugin } from './helpers/test-plugins';
import { knictl } from './helpers/knictl';
import { TestDaemon } from './helpers/test-daemon';

const NETWORKS = 'k8s.v1.cni.cncf.io/networks';

describe('several networks per pod (networks.dir, real CNI plugins)', () => {
  let d: TestDaemon;
  let rt: Client;
  const dir = `/tmp/${RUN}-nets`;
  const bin = `${dir}-bin`;
  const deviceLog = `${dir}-device.log`;
  const recordLog = `${dir}-record.log`;
  const recorded = (cmd: string, containerId: string, ifName: string) =>
    fs.readFileSync(recordLog, 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((l) => l.cmd === cmd && l.containerId === containerId && l.ifName === ifName).at(-1);
  const bridge2 = `${RUN}b2`;
  const write = (file: string, conf: unknown) => {
    fs.mkdirSync(`${dir}/${file.split('/').slice(0, -1).join('/')}`, { recursive: true });
    fs.writeFileSync(`${dir}/${file}`, typeof conf === 'string' ? conf : JSON.stringify(conf));
  };
  const leases = (network: string) => {
    const p = `${d.stateDir}/cni-ipam/${network}`;
    return fs.existsSync(p) ? fs.readdirSync(p).filter((f) => /^\d/.test(f)) : [];
  };
  const addrOf = (netns: string, ifName: string) => inNetns(netns, 'ip', ['-o', '-4', 'addr', 'show', 'dev', ifName]).out;
  /** The pod's default routes as "gateway interface": the kernel's, and GetPod's. */
  const kernelDefaults = (netns: string) =>
    ['-4', '-6'].flatMap((f) => inNetns(netns, 'ip', [f, 'route', 'show', 'default']).out.split('\n').filter(Boolean).map((l) => /via (\S+) dev (\S+)/.exec(l)?.slice(1).join(' ') ?? l)).sort();
  const reportedDefaults = async (id: string) => (await rt.GetPod({ sandbox_id: id })).routes.filter((r: any) => r.gateway).map((r: any) => `${r.gateway} ${r.interface}`).sort();

  before(async () => {
    write('macvlan-static.conf', { cniVersion: '1.0.0', name: 'macvlan-static', type: 'macvlan', master: 'sec0', mode: 'bridge', capabilities: { ips: true }, ipam: { type: 'static' } });
    write('team/macvlan-hl.conflist', { cniVersion: '1.0.0', name: 'macvlan-hl', plugins: [{ type: 'macvlan', master: 'sec1', mode: 'bridge', ipam: { type: 'host-local', ranges: [[{ subnet: '10.91.0.0/24' }]] } }] });
    write('ipvlan-hl.conf', { cniVersion: '1.0.0', name: 'ipvlan-hl', type: 'ipvlan', master: 'sec1', ipam: { type: 'host-local', ranges: [[{ subnet: '10.94.0.0/24' }]] } });
    write('bridge-net.conf', { cniVersion: '0.4.0', name: 'bridge-net', type: 'bridge', bridge: bridge2, isGateway: true, ipam: { type: 'host-local', ranges: [[{ subnet: '10.92.0.0/24' }]] } });
    write('broken.conf', '{"cniVersion": "1.0.0", "name": "broken", "type": ');
    write('dev-net.conf', { cniVersion: '1.0.0', name: 'dev-net', type: 'kni-test-device', capabilities: { deviceID: true, infinibandGUID: true, CNIDeviceInfoFile: true }, logFile: deviceLog });
    installTestPlugin(bin, 'kni-test-device', 'device-cni');
    write('rec-net.conflist', { cniVersion: '1.0.0', name: 'rec-net', plugins: [{ type: 'macvlan', master: 'sec1', mode: 'bridge', ipam: { type: 'host-local', ranges: [[{ subnet: '10.98.0.0/24' }]] } }, { type: 'kni-test-record', capabilities: { portMappings: true, bandwidth: true }, logFile: recordLog }] });
    installTestPlugin(bin, 'kni-test-record', 'record-cni');
    // Static IPAM and macvlan declaring no capability: a selection's ips and mac reach them through CNI_ARGS, as from Multus.
    write('static-legacy.conf', { cniVersion: '1.0.0', name: 'static-legacy', type: 'macvlan', master: 'sec0', mode: 'bridge', ipam: { type: 'static' } });
    // As Multus's quick start writes its macvlan definition: no name (it takes the definition's).
    write('quickstart.conf', { cniVersion: '0.3.1', type: 'macvlan', master: 'sec1', mode: 'bridge', ipam: { type: 'host-local', ranges: [[{ subnet: '10.99.0.0/24' }]] } });
    write('unversioned.conf', { type: 'macvlan', master: 'sec1', mode: 'bridge', ipam: { type: 'host-local', ranges: [[{ subnet: '10.97.0.0/24' }]] } });
    d = await TestDaemon.start({ networks: { dir, deviceInfoDir: `${dir}-devinfo` }, cni: { confDir: '', binDir: '' }, defaultNetwork: { binDirs: ['/usr/lib/cni', bin] } }, { args: ['--metrics-addr', '127.0.0.1:9273'] });
    // The kernel here has no dummy driver: a veth pair each (the far ends stay unused).
    for (const l of ['sec0', 'sec1']) {
      sh('ip', ['-n', d.nodeNetnsName, 'link', 'add', l, 'type', 'veth', 'peer', 'name', `${l}p`]);
      for (const x of [l, `${l}p`]) sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', x, 'up']);
    }
    rt = d.rt();
  });
  after(() => {
    d?.cleanup();
    for (const p of [dir, bin, deviceLog, recordLog, `${dir}-devinfo`]) fs.rmSync(p, { recursive: true, force: true });
  });

  /** A series of the daemon's metrics (0 when it has none). */
  const metric = (series: string): number => {
    const text = inNetns(d.nodeNetns, 'curl', ['-s', 'http://127.0.0.1:9273/metrics']).out;
    return Number(text.split('\n').find((l) => l.startsWith(`${series} `))?.split(' ')[1] ?? 0);
  };

  async function attach(id: string, networks?: string) {
    const netns = d.makePodNetns(id);
    const pod = await rt.Attach({ sandbox_id: id, netns_path: netns, pod: { name: id, namespace: 'default', uid: `u-${id}` }, annotations: networks === undefined ? {} : { [NETWORKS]: networks } });
    return { netns, pod };
  }

  it('a pod selecting three networks gets eth0 then each of them, in order, with what it asked; pods reach each other over every one', async () => {
    const sel = (ip: string) => JSON.stringify([{ name: 'macvlan-static', ips: [`${ip}/24`] }, { name: 'macvlan-hl', namespace: 'team' }, { name: 'bridge-net', interface: 'br9' }]);
    const a = await attach('mn-a', sel('10.90.0.11'));
    const b = await attach('mn-b', sel('10.90.0.12'));
    assert.deepEqual(a.pod.interfaces.map((i: any) => [i.name, i.network, i.default]), [['eth0', '', true], ['net1', 'default/macvlan-static', false], ['net2', 'team/macvlan-hl', false], ['br9', 'default/bridge-net', false]]);
    assert.equal(a.pod.interfaces[1].addresses[0].address, '10.90.0.11');
    assert.match(a.pod.interfaces[2].addresses[0].address, /^10\.91\.0\.\d+$/);
    assert.match(a.pod.interfaces[3].addresses[0].address, /^10\.92\.0\.\d+$/);
    assert.deepEqual(netnsLinks(a.netns).sort(), ['br9', 'eth0', 'lo', 'net1', 'net2']);
    assert.match(addrOf(a.netns, 'net1'), /10\.90\.0\.11\/24/);
    for (const [i, what] of [[1, 'macvlan (static)'], [2, 'macvlan (host-local)'], [3, 'bridge']] as const) {
      const to = b.pod.interfaces[i].addresses[0].address;
      assert.ok(ping(a.netns, to), `no ${what} path from mn-a to ${to}`);
    }
    assert.ok(ping(a.netns, b.pod.interfaces[0].addresses[0].address), 'the default network broke');
    assert.match(inNetns(a.netns, 'ip', ['route', 'show', 'default']).out, /dev eth0/);
    assert.deepEqual((await rt.Check({ sandbox_id: 'mn-a' })).problems, []);
    // Per network, for an operator's dashboards: interfaces now, and the plugins' ADDs.
    for (const network of ['kni', 'default/macvlan-static', 'team/macvlan-hl', 'default/bridge-net']) assert.equal(metric(`kni_network_interfaces{network="${network}"}`), 2, network);
    assert.equal(metric('kni_network_attachments_total{network="team/macvlan-hl",result="ok"}'), 2);
    assert.ok(metric('kni_cni_plugin_duration_seconds_count{plugin="macvlan",command="ADD",result="ok"}') >= 2, 'no plugin timings');
    const nets = (await rt.ListNetworks({})).networks;
    const byName = Object.fromEntries(nets.map((n: any) => [`${n.namespace}/${n.name}`, n]));
    assert.deepEqual(Object.keys(byName).sort(), ['default/bridge-net', 'default/broken', 'default/dev-net', 'default/ipvlan-hl', 'default/macvlan-static', 'default/quickstart', 'default/rec-net', 'default/static-legacy', 'default/unversioned', 'team/macvlan-hl']);
    assert.equal(byName['default/broken'].valid, false);
    assert.match(byName['default/broken'].error, /not JSON/);
    assert.deepEqual(byName['team/macvlan-hl'].attachments.sort(), ['mn-a/net2', 'mn-b/net2']);
    assert.equal(byName['team/macvlan-hl'].source, 'file');
    assert.equal(leases('macvlan-hl').length, 2, 'host-local kept its leases elsewhere than kni\'s state dir');
    const table = knictl('--socket', d.socket, 'networks');
    assert.equal(table.status, 0, table.stderr);
    assert.match(table.stdout, /default\/broken\s+file\s+-\s+-\s+0\s+.*not JSON/);
    assert.match(table.stdout, /team\/macvlan-hl\s+file\s+macvlan\s+-\s+2/);
    assert.match(table.stdout, /team\/macvlan-hl: mn-a\/net2 mn-b\/net2 \(pods default\/mn-a default\/mn-b\)/);
    const pod = knictl('--socket', d.socket, 'pod', 'mn-a');
    assert.match(pod.stdout, /interface net1: network default\/macvlan-static \(by annotation\); mac/);
    assert.match(pod.stdout, /interface eth0: default network, default route;/);
    // knictl trace: a packet to another pod's macvlan address leaves through net2, the network's plugins' to route.
    const to = b.pod.interfaces[2].addresses[0].address;
    const t = await rt.Trace({ sandbox_id: 'mn-a', destination: to });
    assert.deepEqual([t.kind, t.ok, t.hops.map((h: any) => h.at)], ['cni-network', true, ['pod', 'node']]);
    assert.match(t.hops[0].what, new RegExp(`^route to ${to.replace(/\./g, '\\.')} dev net2 src 10\\.91\\.0\\.\\d+$`));
    assert.equal(t.hops[1].what, 'leaves through net2, on team/macvlan-hl: kni does not route that network beyond the pod');
    await rt.Detach({ sandbox_id: 'mn-b' });
    assert.equal(leases('macvlan-hl').length, 1);
    assert.equal(leases('bridge-net').length, 1);
  });

  it('a selection that fails anywhere fails the attach and leaves nothing: no interface, no lease, no address, no record', async () => {
    const usedBefore = (await rt.GetIPAMStatus({})).ranges.map((r: any) => r.used);
    const bridgeLeases = leases('bridge-net').length;
    const netns = d.makePodNetns('mn-fail');
    const req = (networks: string) => rt.Attach({ sandbox_id: 'mn-fail', netns_path: netns, pod: { name: 'mn-fail', namespace: 'default', uid: 'u' }, annotations: { [NETWORKS]: networks } });
    // The static IPAM plugin of the second selection fails (no address asked for).
    await rejectsWith(req('bridge-net,macvlan-static'), grpc.status.INTERNAL, /network default\/macvlan-static: CNI plugin macvlan: .*missing IP config/i);
    // A plugin the kernel cannot serve (no ipvlan here) fails with the kernel's reason.
    await rejectsWith(req('bridge-net,ipvlan-hl'), grpc.status.INTERNAL, /network default\/ipvlan-hl: CNI plugin ipvlan: failed to create ipvlan: operation not supported/);
    await rejectsWith(req('bridge-net, nope@n2'), grpc.status.NOT_FOUND, /network default\/nope: no NetworkAttachmentDefinition/);
    await rejectsWith(req('broken'), grpc.status.FAILED_PRECONDITION, /network default\/broken: its definition is invalid: .*not JSON/);
    await rejectsWith(req('bridge-net@eth0'), grpc.status.INVALID_ARGUMENT, /interface eth0 is used twice/);
    // Each plugin failure counted against its network (the ADDs before it, undone, as ok).
    assert.equal(metric('kni_network_attachments_total{network="default/macvlan-static",result="error"}'), 1);
    assert.equal(metric('kni_network_attachments_total{network="default/ipvlan-hl",result="error"}'), 1);
    assert.ok(metric('kni_network_attachments_total{network="default/bridge-net",result="ok"}') >= 2);
    await rejectsWith(req('[{"name":"bridge-net","ipam-claim-reference":"x"}]'), grpc.status.INVALID_ARGUMENT, /does not support "ipam-claim-reference"/);
    await rejectsWith(req('[{"name":"bridge-net","infiniband-guid":"x"}]'), grpc.status.INVALID_ARGUMENT, /infiniband-guid must be eight hex pairs/);
    assert.deepEqual(netnsLinks(netns), ['lo']);
    assert.equal(leases('bridge-net').length, bridgeLeases);
    assert.deepEqual((await rt.GetIPAMStatus({})).ranges.map((r: any) => r.used), usedBefore);
    await rejectsWith(rt.GetPod({ sandbox_id: 'mn-fail' }), grpc.status.NOT_FOUND, /not attached/);
    // Fixed: the file is read again when a pod asks for it.
    write('broken.conf', { cniVersion: '0.4.0', name: 'broken', type: 'bridge', bridge: bridge2, ipam: { type: 'host-local', ranges: [[{ subnet: '10.93.0.0/24' }]] } });
    const p = await req('broken');
    assert.match(p.interfaces[1].addresses[0].address, /^10\.93\.0\./);
    await rt.Detach({ sandbox_id: 'mn-fail' });
  });

  it('AttachNetwork and DetachNetwork add and remove a network on a running pod; default-route moves the default route and gives it back', async () => {
    const { netns } = await attach('mn-dyn');
    const cli = knictl('--socket', d.socket, 'attach-network', 'mn-dyn', 'bridge-net', '-o', 'json');
    assert.equal(cli.status, 0, cli.stderr);
    const p = JSON.parse(cli.stdout);
    assert.deepEqual(p.interfaces.map((i: any) => i.name), ['eth0', 'net1']);
    assert.equal(p.interfaces[1].selected_by, 'api');
    assert.match(addrOf(netns, 'net1'), /10\.92\.0\./);
    await rejectsWith(rt.AttachNetwork({ sandbox_id: 'mn-dyn', network: 'bridge-net', interface_name: 'net1' }), grpc.status.ALREADY_EXISTS, /already has an interface net1/);
    assert.deepEqual(await reportedDefaults('mn-dyn'), kernelDefaults(netns));
    const q = await rt.AttachNetwork({ sandbox_id: 'mn-dyn', network: 'team/macvlan-hl', interface_name: 'up0', default_route: ['10.91.0.1'] });
    assert.deepEqual(q.interfaces.filter((i: any) => i.default).map((i: any) => i.name), ['up0']);
    assert.match(inNetns(netns, 'ip', ['route', 'show', 'default']).out, /via 10\.91\.0\.1 dev up0/);
    // GetPod's routes say what the kernel has: IPv4's default through up0, IPv6's still through eth0.
    const taken = kernelDefaults(netns);
    assert.ok(taken.includes('10.91.0.1 up0') && taken.some((r) => r.endsWith(' eth0')), taken.join(', '));
    assert.deepEqual(await reportedDefaults('mn-dyn'), taken);
    assert.equal((await rt.DetachNetwork({ sandbox_id: 'mn-dyn', interface_name: 'up0' })).removed, true);
    assert.match(inNetns(netns, 'ip', ['route', 'show', 'default']).out, /dev eth0/);
    assert.deepEqual(await reportedDefaults('mn-dyn'), kernelDefaults(netns));
    assert.match(knictl('--socket', d.socket, 'detach-network', 'mn-dyn', 'net1').stdout, /removed net1/);
    assert.equal((await rt.DetachNetwork({ sandbox_id: 'mn-dyn', interface_name: 'net1' })).removed, false);
    await rejectsWith(rt.DetachNetwork({ sandbox_id: 'mn-dyn', interface_name: 'eth0' }), grpc.status.FAILED_PRECONDITION, /default network's interface/);
    assert.deepEqual(netnsLinks(netns).sort(), ['eth0', 'lo']);
    assert.deepEqual((await rt.GetPod({ sandbox_id: 'mn-dyn' })).interfaces.map((i: any) => i.name), ['eth0']);
    await rt.Detach({ sandbox_id: 'mn-dyn' });
  });

  it('a selection\'s own device (deviceID) and InfiniBand GUID reach its plugins as Multus gives them; the old interfaceRequest names the interface; one device is one attachment\'s', async () => {
    // The kernel here has no dummy driver: a veth end plays the device.
    const dev = `${RUN.slice(0, 9)}nic`;
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'add', dev, 'type', 'veth', 'peer', 'name', `${dev}p`]);
    try {
      const mac = JSON.parse(sh('ip', ['-n', d.nodeNetnsName, '-j', 'link', 'show', 'dev', dev]))[0].address;
      const guid = '24:8a:07:03:00:8d:ae:2e';
      const { netns, pod } = await attach('mn-dev', JSON.stringify([{ name: 'dev-net', interfaceRequest: 'ib0', 'infiniband-guid': guid.toUpperCase(), deviceID: dev }]));
      const ib0 = pod.interfaces.find((i: any) => i.name === 'ib0');
      assert.deepEqual([ib0?.device_id, ib0?.mac], [dev, mac]);
      assert.match(inNetns(netns, 'ip', ['link', 'show', 'ib0']).out, new RegExp(mac));
      const add = JSON.parse(fs.readFileSync(deviceLog, 'utf8').trim().split('\n').at(-1)!);
      // Only as the capability the definition declares (as Multus): not written into the config, where
      // SR-IOV CNI would take it as the kubelet's, so a pod could name a device another pod holds.
      assert.deepEqual([add.cmd, add.deviceID, add.pciBusID, add.runtimeConfig.deviceID, add.runtimeConfig.infinibandGUID], ['ADD', undefined, undefined, dev, guid]);
      // No device plugin's file to copy: the path is the plugins' to write, as Multus gives it.
      assert.equal(add.runtimeConfig.CNIDeviceInfoFile, `${dir}-devinfo/cni/default-dev-net-mn-dev_ib0`);
      // kni's AttachNetwork takes the same keys (knictl attach-network's flags): a second device
      // added to the running pod; the first one is its first interface's alone.
      const dev2 = `${RUN.slice(0, 9)}nic2`;
      sh('ip', ['-n', d.nodeNetnsName, 'link', 'add', dev2, 'type', 'veth', 'peer', 'name', `${dev2}p`]);
      const cli = knictl('--socket', d.socket, 'attach-network', 'mn-dev', 'dev-net', '--interface', 'ib1', '--device-id', dev2, '--infiniband-guid', guid, '--cni-args', '{"tier":"fast"}', '-o', 'json');
      assert.equal(cli.status, 0, cli.stderr);
      assert.equal(JSON.parse(cli.stdout).interfaces.find((i: any) => i.name === 'ib1').device_id, dev2);
      const add2 = JSON.parse(fs.readFileSync(deviceLog, 'utf8').trim().split('\n').at(-1)!);
      assert.deepEqual([add2.ifName, add2.runtimeConfig.deviceID, add2.runtimeConfig.infinibandGUID], ['ib1', dev2, guid]);
      // The cni-args are the plugins' args.cni, kept with the ADD for its DEL.
      assert.deepEqual(JSON.parse(fs.readFileSync(`${d.stateDir}/cni-results/dev-net-mn-dev-ib1.json`, 'utf8')).cniArgs, { tier: 'fast' });
      await rejectsWith(rt.AttachNetwork({ sandbox_id: 'mn-dev', network: 'dev-net', interface_name: 'ib2', device_id: dev }), grpc.status.INVALID_ARGUMENT, new RegExp(`asks for device ${dev}, which ib0 of sandbox mn-dev already has`));
      await rejectsWith(rt.AttachNetwork({ sandbox_id: 'mn-dev', network: 'dev-net', cni_args_json: '[1]' }), grpc.status.INVALID_ARGUMENT, /cni_args_json must be a JSON object/);
      // The same device for a second attachment of the pod: refused by name, nothing left.
      const twice = JSON.stringify([{ name: 'dev-net', deviceID: dev }, { name: 'dev-net', deviceID: dev }]);
      const netns2 = d.makePodNetns('mn-dev2');
      await rejectsWith(rt.Attach({ sandbox_id: 'mn-dev2', netns_path: netns2, pod: { name: 'mn-dev2', namespace: 'default', uid: 'u' }, annotations: { [NETWORKS]: twice } }), grpc.status.INVALID_ARGUMENT, new RegExp(`asks for device ${dev}, which net1 of sandbox mn-dev2 already has`));
      assert.deepEqual(netnsLinks(netns2), ['lo']);
      await rt.Detach({ sandbox_id: 'mn-dev' });
      assert.match(sh('ip', ['-n', d.nodeNetnsName, 'link', 'show', dev]), new RegExp(mac), 'the device is not back on the node');
      assert.match(sh('ip', ['-n', d.nodeNetnsName, 'link', 'show', dev2]), new RegExp(dev2), 'the second device is not back on the node');
      assert.deepEqual(netnsLinks(netns), ['lo']);
    } finally {
      for (const l of [dev, `${RUN.slice(0, 9)}nic2`]) trySh('ip', ['-n', d.nodeNetnsName, 'link', 'del', l]);
    }
  });

  it("a selection's portMappings and bandwidth reach the plugins declaring them as Multus gives them, keys in any case as Go reads them (hostIP, HostPort); AttachNetwork takes them too", async () => {
    const sel = [{ name: 'rec-net', portMappings: [{ HostPort: 8443, containerPort: 443, protocol: 'TCP', hostIP: '192.0.2.9' }, { hostPort: 5353, containerPort: 53, protocol: 'udp' }], bandwidth: { ingressRate: 1000000, IngressBurst: 200000 } }];
    await attach('mn-caps', JSON.stringify(sel));
    const add = recorded('ADD', 'mn-caps', 'net1');
    // hostIP was dropped before (read as hostIp only): the plugin would have mapped the port on every address.
    assert.deepEqual(add.runtimeConfig.portMappings, [{ hostPort: 8443, containerPort: 443, protocol: 'tcp', hostIP: '192.0.2.9' }, { hostPort: 5353, containerPort: 53, protocol: 'udp' }]);
    assert.deepEqual(add.runtimeConfig.bandwidth, { ingressRate: 1000000, ingressBurst: 200000 });
    // The same through kni's API and knictl, checked as the annotation's are.
    const cli = knictl('--socket', d.socket, 'attach-network', 'mn-caps', 'rec-net', '--port-mappings', '[{"hostPort":9443,"containerPort":443,"hostIP":"192.0.2.10"}]', '--bandwidth', '{"egressRate":2000000,"egressBurst":300000}', '-o', 'json');
    assert.equal(cli.status, 0, cli.stderr);
    const add2 = recorded('ADD', 'mn-caps', 'net2');
    assert.deepEqual([add2.runtimeConfig.portMappings, add2.runtimeConfig.bandwidth], [[{ hostPort: 9443, containerPort: 443, protocol: 'tcp', hostIP: '192.0.2.10' }], { egressRate: 2000000, egressBurst: 300000 }]);
    await rejectsWith(rt.AttachNetwork({ sandbox_id: 'mn-caps', network: 'rec-net', port_mappings_json: '{"hostPort":1}' }), grpc.status.INVALID_ARGUMENT, /port_mappings_json must be a JSON list/);
    await rejectsWith(rt.AttachNetwork({ sandbox_id: 'mn-caps', network: 'rec-net', port_mappings_json: '[{"hostPort":70000,"containerPort":1}]' }), grpc.status.INVALID_ARGUMENT, /network default\/rec-net: port mapping hostPort 70000 is not a port/);
    await rejectsWith(rt.AttachNetwork({ sandbox_id: 'mn-caps', network: 'rec-net', bandwidth_json: '{"ingressRate":"fast"}' }), grpc.status.INVALID_ARGUMENT, /bandwidth ingressRate "fast" is out of range/);
    assert.deepEqual((await rt.GetPod({ sandbox_id: 'mn-caps' })).interfaces.map((i: any) => i.name), ['eth0', 'net1', 'net2']);
    await rt.Detach({ sandbox_id: 'mn-caps' });
    assert.deepEqual(recorded('DEL', 'mn-caps', 'net1').runtimeConfig.portMappings, add.runtimeConfig.portMappings);
  });

  it('a config without a name takes its definition\'s, as Multus gives it (its quick start\'s macvlan has none); one without cniVersion runs as 0.1.0, as libcni runs it', async () => {
    const { netns, pod } = await attach('mn-qs', 'quickstart,unversioned');
    assert.match(pod.interfaces[1].addresses[0].address, /^10\.99\.0\./);
    assert.deepEqual([pod.interfaces[2].addresses[0].address.replace(/\d+$/, 'x'), pod.interfaces[2].addresses[0].prefix_length], ['10.97.0.x', 24]);
    assert.match(inNetns(netns, 'ip', ['-d', 'link', 'show', 'net1']).out, /macvlan/);
    assert.equal((await rt.ListNetworks({})).networks.find((n: any) => n.name === 'quickstart').cni_name, 'quickstart');
    await rt.Detach({ sandbox_id: 'mn-qs' });
    assert.deepEqual(netnsLinks(netns), ['lo']);
  });

  it("a selection's ips and mac reach plugins declaring no such capability through CNI_ARGS (IP=, MAC=), as Multus gives them (on ADD)", async () => {
    const mac = '0a:58:0a:59:00:07';
    const { netns, pod } = await attach('mn-legacy', JSON.stringify([{ name: 'static-legacy', ips: ['10.89.0.7/24'], mac }, { name: 'rec-net', ips: ['10.98.0.9/24'] }]));
    assert.deepEqual([pod.interfaces[1].addresses[0].address, pod.interfaces[1].mac], ['10.89.0.7', mac]);
    assert.match(inNetns(netns, 'ip', ['addr', 'show', 'net1']).out, new RegExp(`link/ether ${mac}[\\s\\S]*inet 10\\.89\\.0\\.7/24`));
    // rec-net's macvlan + host-local declare no ips either: host-local took the address asked for through IP=.
    assert.equal(pod.interfaces[2].addresses[0].address, '10.98.0.9');
    assert.match(recorded('ADD', 'mn-legacy', 'net2').args, /^IgnoreUnknown=1;K8S_POD_NAMESPACE=default;.*;IP=10\.98\.0\.9\/24$/);
    await rt.Detach({ sandbox_id: 'mn-legacy' });
    assert.doesNotMatch(recorded('DEL', 'mn-legacy', 'net2').args, /IP=/);
    assert.deepEqual(netnsLinks(netns), ['lo']);
  });

  it('kni killed, the definition deleted meanwhile: the detach after the restart runs DEL with the config ADD ran with, and frees the lease', async () => {
    const { netns } = await attach('mn-kill', JSON.stringify([{ name: 'macvlan-hl', namespace: 'team' }]));
    const before = leases('macvlan-hl').length;
    await d.restart('SIGKILL');
    rt = d.rt();
    fs.rmSync(`${dir}/team/macvlan-hl.conflist`);
    assert.deepEqual((await rt.GetPod({ sandbox_id: 'mn-kill' })).interfaces.map((i: any) => i.network), ['', 'team/macvlan-hl']);
    await rt.Detach({ sandbox_id: 'mn-kill' });
    assert.equal(leases('macvlan-hl').length, before - 1);
    assert.deepEqual(netnsLinks(netns), ['lo']);
    await rt.Detach({ sandbox_id: 'mn-a' });
    assert.deepEqual(leases('macvlan-hl'), []);
    assert.deepEqual(leases('bridge-net'), []);
  });

  it('v1.multus-cni.io/default-network: the pod\'s eth0 comes from that definition (a name alone from kube-system), through every entry point; kni\'s IPAM and host ports stay out; released with the config ADD ran with, across a kill -9', async () => {
    const DEFAULT_NETWORK = 'v1.multus-cni.io/default-network';
    write('kube-system/bridge-def.conf', { cniVersion: '1.0.0', name: 'bridge-def', type: 'bridge', bridge: `${RUN}b3`, isGateway: true, isDefaultGateway: true, ipam: { type: 'host-local', ranges: [[{ subnet: '10.95.0.0/24' }]] } });
    const usedBefore = (await rt.GetIPAMStatus({})).ranges.map((r: any) => r.used);
    const netns = d.makePodNetns('dn-a');
    const a = await rt.Attach({
      sandbox_id: 'dn-a', netns_path: netns, pod: { name: 'dn-a', namespace: 'default', uid: 'u-dn-a' },
      annotations: { [DEFAULT_NETWORK]: 'bridge-def', [NETWORKS]: 'bridge-net' },
      port_mappings: [{ host_port: 18080, container_port: 80, protocol: 'TCP' }],
    });
    assert.deepEqual(a.interfaces.map((i: any) => [i.name, i.network, i.default, i.default_network]), [['eth0', '', true, 'kube-system/bridge-def'], ['net1', 'default/bridge-net', false, '']]);
    assert.match(a.interfaces[0].addresses[0].address, /^10\.95\.0\.\d+$/);
    assert.match(addrOf(netns, 'eth0'), /10\.95\.0\.\d+\/24/);
    assert.match(inNetns(netns, 'ip', ['route', 'show', 'default']).out, /via 10\.95\.0\.1 dev eth0/);
    assert.deepEqual((await rt.GetIPAMStatus({})).ranges.map((r: any) => r.used), usedBefore, "kni's IPAM gave the pod an address");
    assert.doesNotMatch(inNetns(d.nodeNetns, 'iptables', ['-t', 'nat', '-S']).out, /18080/, "kni's host-port DNAT took a port the default network's plugins own");
    assert.equal(leases('bridge-def').length, 1);
    assert.deepEqual((await rt.Check({ sandbox_id: 'dn-a' })).problems, []);
    assert.deepEqual((await rt.ListNetworks({})).networks.find((n: any) => n.name === 'bridge-def').attachments, ['dn-a/eth0']);
    assert.match(knictl('--socket', d.socket, 'pod', 'dn-a').stdout, /interface eth0: default network kube-system\/bridge-def \(the pod's choice\), default route;/);

    // The CNI entry point (containerd hands the pod annotations over): the runtime's pod IPs are the chosen network's.
    const cniNetns = d.makePodNetns('dn-c');
    const conf = { cniVersion: '1.0.0', name: 'kni', socket: d.cniSocket, runtimeConfig: { 'io.kubernetes.cri.pod-annotations': { [DEFAULT_NETWORK]: 'kube-system/bridge-def' } } };
    const add = cni('ADD', { CNI_CONTAINERID: 'dn-c', CNI_NETNS: cniNetns, CNI_IFNAME: 'eth0' }, conf);
    assert.equal(add.code, 0, add.raw);
    assert.deepEqual(add.out.ips.map((i: any) => i.address.replace(/\.\d+\//, '.x/')), ['10.95.0.x/24']);
    assert.equal(cni('DEL', { CNI_CONTAINERID: 'dn-c', CNI_NETNS: cniNetns, CNI_IFNAME: 'eth0' }, conf).code, 0);
    assert.equal(leases('bridge-def').length, 1);

    // Refused, naming the annotation, with nothing left behind.
    const refused = async (value: string, code: number, message: RegExp) => {
      await rejectsWith(rt.Attach({ sandbox_id: 'dn-bad', netns_path: d.makePodNetns(`dn-bad${code}${value.length}`), pod: { name: 'dn-bad', namespace: 'default', uid: 'u' }, annotations: { [DEFAULT_NETWORK]: value } }), code, message);
      assert.equal((await rt.ListPods({})).pods.some((p: any) => p.sandbox_id === 'dn-bad'), false);
    };
    await refused('nope', grpc.status.NOT_FOUND, /network kube-system\/nope: no NetworkAttachmentDefinition/);
    await refused('bridge-def, bridge-net', grpc.status.INVALID_ARGUMENT, /v1\.multus-cni\.io\/default-network names 2 networks; a pod has one default network/);
    await refused('bridge-def@net7', grpc.status.INVALID_ARGUMENT, /the default network's interface is the one the runtime names \(eth0\), not "net7"/);
    await refused('[{"name":"bridge-def","default-route":["10.95.0.1"]}]', grpc.status.INVALID_ARGUMENT, /default-route does not apply/);
    assert.equal(leases('bridge-def').length, 1);

    // kill -9, the definition deleted meanwhile: the release runs DEL with the config ADD ran with.
    await d.restart('SIGKILL');
    rt = d.rt();
    fs.rmSync(`${dir}/kube-system/bridge-def.conf`);
    assert.equal((await rt.GetPod({ sandbox_id: 'dn-a' })).interfaces[0].default_network, 'kube-system/bridge-def');
    await rt.Detach({ sandbox_id: 'dn-a' });
    assert.deepEqual(leases('bridge-def'), []);
    assert.deepEqual(netnsLinks(netns), ['lo']);
  });

  describe('networks.everyPod (as Multus\'s defaultNetworks)', () => {
    let every: TestDaemon;
    before(async () => {
      write('kube-system/shared-every.conf', { cniVersion: '1.0.0', name: 'shared-every', type: 'bridge', bridge: `${RUN}be`, ipam: { type: 'host-local', ranges: [[{ subnet: '10.96.3.0/24' }]] } });
      write('team/store.conf', { cniVersion: '1.0.0', name: 'store', type: 'bridge', bridge: `${RUN}bo`, ipam: { type: 'host-local', ranges: [[{ subnet: '10.96.4.0/24' }]] } });
      every = await TestDaemon.start({ ranges: ['10.97.1.0/24'], networks: { dir, everyPod: ['shared-every', 'team/store@st0'], systemNamespaces: ['kube-system', 'infra'] }, cni: { confDir: '', binDir: '' }, defaultNetwork: { binDirs: ['/usr/lib/cni'] } });
    });
    after(() => every?.cleanup());

    const attachIn = (id: string, namespace: string, networks?: string) =>
      every.rt().Attach({ sandbox_id: id, netns_path: every.makePodNetns(id), pod: { name: id, namespace, uid: `u-${id}` }, annotations: networks ? { [NETWORKS]: networks } : {} });
    const shape = (p: any) => p.interfaces.map((i: any) => [i.name, i.network, i.selected_by]);

    it('every pod gets them after eth0 and before its own, which are counted after them; system namespaces do not; release takes them all', async () => {
      const a = await attachIn('ev-a', 'default', 'bridge-net');
      assert.deepEqual(shape(a), [['eth0', '', ''], ['net1', 'kube-system/shared-every', 'config'], ['st0', 'team/store', 'config'], ['net3', 'default/bridge-net', 'annotation']]);
      assert.match(addrOf(a.netns_path, 'st0'), /10\.96\.4\.\d+/);
      const plain = await attachIn('ev-b', 'default');
      assert.deepEqual(shape(plain).map((x: string[]) => x[0]), ['eth0', 'net1', 'st0']);
      const sys = await attachIn('ev-c', 'infra', 'default/bridge-net');
      assert.deepEqual(shape(sys), [['eth0', '', ''], ['net1', 'default/bridge-net', 'annotation']]);
      await rejectsWith(attachIn('ev-d', 'default', 'bridge-net@st0'), grpc.status.INVALID_ARGUMENT, /interface st0 is used twice/);
      const knictlPod = knictl('--socket', every.socket, 'pod', 'ev-a');
      assert.match(knictlPod.stdout, /interface st0: network team\/store \(by config\)/);
      for (const id of ['ev-a', 'ev-b', 'ev-c']) await every.rt().Detach({ sandbox_id: id });
      assert.deepEqual((await every.rt().ListPods({})).pods, []);
      for (const n of ['shared-every', 'store']) assert.deepEqual(fs.existsSync(`${every.stateDir}/cni-ipam/${n}`) ? fs.readdirSync(`${every.stateDir}/cni-ipam/${n}`).filter((f) => /^\d/.test(f)) : [], [], `${n} kept a lease`);
    });

    it('one of them gone: the node says so (GetNode warnings, knictl node) until it is back', async () => {
      const warnings = async () => (await every.rt().GetNode({})).warnings.filter((w: string) => w.includes('everyPod'));
      // A pod naming a network kni does not know makes it read networks.dir again.
      const rescan = () => attachIn(`ev-s${Date.now() % 1000}`, 'default', 'not-there').catch(() => undefined);
      assert.deepEqual(await warnings(), []);
      fs.renameSync(`${dir}/team/store.conf`, `${dir}/team/store.off`);
      await rescan();
      assert.deepEqual(await warnings(), ['networks.everyPod: team/store is not defined: every new pod outside kube-system, infra fails to start until it is fixed']);
      assert.match(knictl('--socket', every.socket, 'node').stdout, /networks\.everyPod: team\/store is not defined/);
      fs.renameSync(`${dir}/team/store.off`, `${dir}/team/store.conf`);
      await rescan();
      assert.deepEqual(await warnings(), []);
    });
  });

  describe('networks.namespaceIsolation (as Multus has it)', () => {
    let iso: TestDaemon;
    before(async () => {
      write('team/net-t.conf', { cniVersion: '1.0.0', name: 'net-t', type: 'bridge', bridge: `${RUN}bt`, ipam: { type: 'host-local', ranges: [[{ subnet: '10.96.1.0/24' }]] } });
      write('shared/net-s.conf', { cniVersion: '1.0.0', name: 'net-s', type: 'bridge', bridge: `${RUN}bs`, ipam: { type: 'host-local', ranges: [[{ subnet: '10.96.2.0/24' }]] } });
      iso = await TestDaemon.start({ ranges: ['10.97.0.0/24'], networks: { dir, namespaceIsolation: true, globalNamespaces: ['shared'] }, cni: { confDir: '', binDir: '' }, defaultNetwork: { binDirs: ['/usr/lib/cni'] } });
    });
    after(() => iso?.cleanup());

    const attachIn = (id: string, namespace: string, networks: string) =>
      iso.rt().Attach({ sandbox_id: id, netns_path: iso.makePodNetns(id), pod: { name: id, namespace, uid: `u-${id}` }, annotations: { [NETWORKS]: networks } });

    it('a pod uses networks of its own namespace, default and the global namespaces; another tenant\'s is refused by name, and nothing is left', async () => {
      const ok = await attachIn('iso-a', 'team', 'net-t, shared/net-s, default/bridge-net');
      assert.deepEqual(ok.interfaces.map((i: any) => i.network), ['', 'team/net-t', 'shared/net-s', 'default/bridge-net']);
      await rejectsWith(attachIn('iso-b', 'other', 'shared/net-s, team/net-t'), grpc.status.INVALID_ARGUMENT, /namespace isolation: pods of namespace other may use networks of other, default, shared only, not team\/net-t$/);
      assert.equal((await iso.rt().ListPods({})).pods.length, 1);
      await iso.rt().Detach({ sandbox_id: 'iso-a' });
    });

    it('the same rule for the default network a pod chooses (v1.multus-cni.io/default-network): another tenant\'s is refused, its own is taken', async () => {
      const choose = (id: string, namespace: string, network: string) =>
        iso.rt().Attach({ sandbox_id: id, netns_path: iso.makePodNetns(id), pod: { name: id, namespace, uid: `u-${id}` }, annotations: { 'v1.multus-cni.io/default-network': network } });
      await rejectsWith(choose('iso-d1', 'default', 'team/net-t'), grpc.status.INVALID_ARGUMENT, /^v1\.multus-cni\.io\/default-network: namespace isolation: pods of namespace default may use networks of default, shared only, not team\/net-t$/);
      await rejectsWith(choose('iso-d2', 'other', 'net-t'), grpc.status.INVALID_ARGUMENT, /not kube-system\/net-t$/);
      assert.equal((await iso.rt().ListPods({})).pods.length, 0, 'a refused pod was attached');
      const own = await choose('iso-d3', 'team', 'team/net-t');
      assert.equal(own.interfaces[0].default_network, 'team/net-t');
      await iso.rt().Detach({ sandbox_id: 'iso-d3' });
    });
  });
});
