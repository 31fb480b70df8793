// Several networks per pod in a real cluster: NetworkAttachmentDefinitions (the CRD from kni's
// manifest) selected with the k8s.v1.cni.cncf.io/networks annotation, carried by a second wire
// between the workers (sec0: macvlan with static IPAM, sec1: macvlan with host-local, secbr: a
// bridge with static IPAM; ipvlan cannot run here: the kernel is built without CONFIG_IPVLAN).
// network-status on the Pod, missing and broken definitions, networks added to and removed
// from running pods, and everything released with the pod.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { RUN, trySh } from '../helpers/sh';
import { TestDevicePlugin } from '../helpers/test-device-plugin';
import { installTestPlugin } from '../helpers/test-plugins';
import { waitFor } from '../helpers/wait';
import { apply, CL, cluster, knictl, kniWith, kubectl, kubectlJson, POD, WORKERS } from './cluster-helpers';

const NAD = (name: string, config: unknown) => `apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: ${name}, namespace: default}
spec:
  config: '${typeof config === 'string' ? config : JSON.stringify(config)}'
`;

const MULTINET = (name: string, node: string, networks: unknown) =>
  POD(name, node, { labels: { app: 'multinet' }, annotations: { 'k8s.v1.cni.cncf.io/networks': JSON.stringify(networks) } });

const MACVLAN = { cniVersion: '1.0.0', name: 'macvlan-static', type: 'macvlan', master: 'sec0', mode: 'bridge', capabilities: { ips: true }, ipam: { type: 'static' }, dns: { nameservers: ['10.250.0.53'], search: ['static.example'] } };
const MACVLAN_HL = { cniVersion: '1.0.0', name: 'macvlan-hl', plugins: [{ type: 'macvlan', master: 'sec1', mode: 'bridge', capabilities: { ips: true }, ipam: { type: 'host-local', ranges: [[{ subnet: '10.251.0.0/24' }]] } }] };
const BRIDGE = { cniVersion: '0.4.0', name: 'bridge-static', type: 'bridge', bridge: 'secbr', capabilities: { ips: true }, ipam: { type: 'static' } };
const BRIDGE_BW = { cniVersion: '1.0.0', name: 'bridge-bw', plugins: [{ type: 'bridge', bridge: 'secbw', ipam: { type: 'host-local', ranges: [[{ subnet: '10.253.0.0/24' }]] } }, { type: 'bandwidth', capabilities: { bandwidth: true } }] };

const status = (pod: string): any[] => JSON.parse(kubectlJson('get', 'pod', pod).metadata.annotations?.['k8s.v1.cni.cncf.io/network-status'] ?? '[]');
const phase = (pod: string): string => kubectlJson('get', 'pod', pod).status.phase;
const addrsInPod = (pod: string): Record<string, string[]> => {
  const out: Record<string, string[]> = {};
  for (const l of kubectl('exec', pod, '--', '/bin/busybox', 'ip', '-o', '-4', 'addr').split('\n')) {
    const m = /^\d+:\s+(\S+)\s+inet\s+([\d.]+)\//.exec(l);
    if (m && m[1] !== 'lo') (out[m[1]] ??= []).push(m[2]);
  }
  return out;
};
const http = (from: string, ip: string) => kubectl('exec', from, '--', '/bin/busybox', 'sh', '-c', `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 5 ${ip} 80`);
const podEvents = (pod: string) => kubectlJson('get', 'events', '--field-selector', `involvedObject.name=${pod}`).items.map((e: any) => `${e.reason}: ${e.message}`).join('\n');

describe('cluster: several networks per pod (NetworkAttachmentDefinitions)', function () {
  this.timeout(300_000);

  // networks.everyPod for the pods of every namespace but default (and kube-system): the other
  // tests' pods are in default.
  before(() => {
    cluster('down');
    cluster('up');
    kniWith('networks: { everyPod: [default/macvlan-hl], systemNamespaces: [kube-system, default] }\n');
    apply([NAD('macvlan-static', MACVLAN), NAD('macvlan-hl', MACVLAN_HL), NAD('bridge-static', BRIDGE), NAD('bridge-bw', BRIDGE_BW)].join('---\n'));
  });
  after(() => {
    cluster('down');
  });

  it('a pod with two extra networks reaches a pod on the other node over each; network-status matches its netns', async () => {
    apply(MULTINET('mn-a', 'w1', [{ name: 'macvlan-static', ips: ['10.250.0.11/24'] }, { name: 'macvlan-hl' }]));
    apply(MULTINET('mn-b', 'w2', [{ name: 'macvlan-static', ips: ['10.250.0.12/24'] }, { name: 'macvlan-hl', ips: ['10.251.0.100/24'] }]));
    await waitFor(() => phase('mn-a') === 'Running' && phase('mn-b') === 'Running', 120_000, () => kubectl('get', 'pods', '-o', 'wide') + podEvents('mn-a') + podEvents('mn-b'));
    await waitFor(() => status('mn-a').length === 3 && status('mn-b').length === 3, 60_000, () => JSON.stringify([status('mn-a'), status('mn-b')]));
    const sa = status('mn-a');
    assert.deepEqual(sa.map((s) => [s.name, s.interface, s.default ?? false]), [['kni', 'eth0', true], ['default/macvlan-static', 'net1', false], ['default/macvlan-hl', 'net2', false]]);
    const inPod = addrsInPod('mn-a');
    for (const s of sa) assert.deepEqual(inPod[s.interface], s.ips.filter((ip: string) => !ip.includes(':')), `${s.interface}: network-status says ${s.ips}, the netns has ${inPod[s.interface]}`);
    assert.equal(sa[0].ips[0], kubectlJson('get', 'pod', 'mn-a').status.podIP, 'the default network is not the pod IP');
    assert.deepEqual(sa[1].ips, ['10.250.0.11']);
    assert.match(sa[2].ips[0], /^10\.251\.0\.\d+$/);
    for (const ip of ['10.250.0.12', '10.251.0.100']) assert.match(http('mn-a', ip), /hello from kni e2e/, `mn-a (kc-w1) → mn-b (kc-w2) ${ip}`);
    assert.match(http('mn-b', sa[2].ips[0]), /hello from kni e2e/, 'mn-b → mn-a over macvlan-hl');
    const sandbox = knictl('w1', 'pods').find((p: any) => p.pod.name === 'mn-a');
    const pod = knictl('w1', 'pod', sandbox.sandbox_id);
    assert.deepEqual(pod.interfaces.map((i: any) => [i.name, i.network, i.addresses.map((a: any) => a.address).filter((a: string) => !a.includes(':'))]), sa.map((s) => [s.interface, s.name === 'kni' ? '' : s.name, s.ips.filter((ip: string) => !ip.includes(':'))]));
    // The MTU as Multus writes it (mtu, from each interface), where kni knows it.
    assert.deepEqual(sa.map((s) => s.mtu), pod.interfaces.map((i: any) => i.mtu || undefined));
    assert.ok(sa[0].mtu > 0, 'the default network\'s interface has no mtu in network-status');
    // The default routes' gateways on the interface holding them (as Multus writes gateway).
    assert.deepEqual(sa.map((s) => s.gateway), [pod.interfaces[0].addresses.map((a: any) => a.gateway), undefined, undefined]);
    // The plugins' dns, from the definition that gives one (as Multus writes dns); {} for the others.
    assert.deepEqual(sa.map((s) => s.dns), [{}, { nameservers: ['10.250.0.53'], search: ['static.example'] }, {}]);
    const nets = knictl('w1', 'networks');
    assert.deepEqual(nets.map((n: any) => [`${n.namespace}/${n.name}`, n.source, n.attachments.length]), [['default/bridge-bw', 'api', 0], ['default/bridge-static', 'api', 0], ['default/macvlan-hl', 'api', 1], ['default/macvlan-static', 'api', 1]]);
  });

  it('a pod choosing its default network (v1.multus-cni.io/default-network) gets eth0 and its pod IP from that definition, and reaches its peer on the other node over it', async () => {
    const chosen = (name: string, node: string, ip: string) => POD(name, node, { labels: { app: 'multinet' }, annotations: { 'v1.multus-cni.io/default-network': JSON.stringify([{ name: 'macvlan-static', namespace: 'default', ips: [`${ip}/24`] }]) } });
    apply([chosen('dn-a', 'w1', '10.250.0.21'), chosen('dn-b', 'w2', '10.250.0.22')].join('---\n'));
    await waitFor(() => phase('dn-a') === 'Running' && phase('dn-b') === 'Running', 120_000, () => kubectl('get', 'pods', '-o', 'wide') + podEvents('dn-a') + podEvents('dn-b'));
    assert.equal(kubectlJson('get', 'pod', 'dn-a').status.podIP, '10.250.0.21');
    await waitFor(() => status('dn-a').length === 1, 60_000, () => JSON.stringify(status('dn-a')));
    assert.deepEqual(status('dn-a').map((s) => [s.name, s.interface, s.ips, s.default ?? false]), [['default/macvlan-static', 'eth0', ['10.250.0.21'], true]]);
    assert.deepEqual(addrsInPod('dn-a'), { eth0: ['10.250.0.21'] });
    assert.match(http('dn-a', '10.250.0.22'), /hello from kni e2e/, 'dn-a (kc-w1) → dn-b (kc-w2) over the chosen default network');
    const sandbox = knictl('w1', 'pods').find((p: any) => p.pod.name === 'dn-a');
    assert.equal(knictl('w1', 'pod', sandbox.sandbox_id).interfaces[0].default_network, 'default/macvlan-static');
    // Chosen once: an edit is answered with a Warning Event, and the running pod keeps its network.
    kubectl('annotate', 'pod', 'dn-b', '--overwrite', 'v1.multus-cni.io/default-network=bridge-static');
    await waitFor(() => /DefaultNetworkNotApplied: the pod asks for default network kube-system\/bridge-static, but its sandbox was wired with default\/macvlan-static/.test(podEvents('dn-b')), 60_000, () => podEvents('dn-b'));
    assert.match(http('dn-a', '10.250.0.22'), /hello from kni e2e/);
  });

  it('a pod asking for a missing network waits in ContainerCreating with the reason in its events, and starts once the definition exists', async () => {
    apply(MULTINET('mn-wait', 'w1', [{ name: 'later-net', ips: ['10.253.0.5/24'] }]));
    await waitFor(() => /network default\/later-net: no NetworkAttachmentDefinition/.test(podEvents('mn-wait')), 90_000, () => podEvents('mn-wait'));
    assert.equal(phase('mn-wait'), 'Pending');
    apply(NAD('later-net', { ...BRIDGE, name: 'later-net' }));
    await waitFor(() => phase('mn-wait') === 'Running', 120_000, () => podEvents('mn-wait'));
    assert.deepEqual(addrsInPod('mn-wait').net1, ['10.253.0.5']);
  });

  it('a broken definition gets a Warning Event; pods asking for it fail with the parse error until it is fixed', async () => {
    apply(NAD('broken-net', '{"cniVersion": "1.0.0", "name": "broken-net", "type": 7}'));
    await waitFor(() => kubectlJson('get', 'events', '--field-selector', 'involvedObject.name=broken-net,reason=InvalidConfig').items.length > 0, 60_000, () => kubectl('get', 'events'));
    apply(MULTINET('mn-broken', 'w2', [{ name: 'broken-net', ips: ['10.254.0.5/24'] }]));
    await waitFor(() => /network default\/broken-net: its definition is invalid/.test(podEvents('mn-broken')), 90_000, () => podEvents('mn-broken'));
    apply(NAD('broken-net', { ...BRIDGE, name: 'broken-net' }));
    await waitFor(() => phase('mn-broken') === 'Running', 120_000, () => podEvents('mn-broken'));
  });

  it('editing the networks annotation of a running pod adds and removes interfaces live, with what each selection asks (bandwidth); network-status follows', async () => {
    const set = (networks: unknown) => kubectl('annotate', '--overwrite', 'pod', 'mn-a', `k8s.v1.cni.cncf.io/networks=${JSON.stringify(networks)}`);
    set([{ name: 'macvlan-static', ips: ['10.250.0.11/24'] }, { name: 'macvlan-hl' }, { name: 'bridge-static', ips: ['10.252.0.11/24'], interface: 'br1' }]);
    await waitFor(() => addrsInPod('mn-a').br1?.[0] === '10.252.0.11' && status('mn-a').some((s) => s.interface === 'br1'), 60_000, () => JSON.stringify([addrsInPod('mn-a'), status('mn-a')]));
    // A selection's bandwidth (and port mappings) reach the plugins of a network added live too.
    const shaped = () => execFileSync('tc', ['-n', 'kc-w1', 'qdisc', 'show'], { encoding: 'utf8' }).split('\n').filter((l) => / tbf .*rate 7Mbit/.test(l));
    const bw = { ingressRate: 7_000_000, ingressBurst: 7_000_000, egressRate: 7_000_000, egressBurst: 7_000_000 };
    set([{ name: 'macvlan-static', ips: ['10.250.0.11/24'] }, { name: 'macvlan-hl' }, { name: 'bridge-static', ips: ['10.252.0.11/24'], interface: 'br1' }, { name: 'bridge-bw', interface: 'bw1', bandwidth: bw }]);
    await waitFor(() => !!addrsInPod('mn-a').bw1 && status('mn-a').some((s) => s.interface === 'bw1'), 60_000, () => JSON.stringify([addrsInPod('mn-a'), status('mn-a')]) + podEvents('mn-a'));
    assert.equal(shaped().length, 2, 'the bandwidth plugin shaped the added interface (its host veth and ifb)');
    set([{ name: 'macvlan-static', ips: ['10.250.0.11/24'] }, { name: 'bridge-static', ips: ['10.252.0.11/24'], interface: 'br1' }]);
    await waitFor(() => !addrsInPod('mn-a').net2 && !addrsInPod('mn-a').bw1 && !status('mn-a').some((s) => s.interface === 'net2'), 60_000, () => JSON.stringify([addrsInPod('mn-a'), status('mn-a')]));
    assert.deepEqual(status('mn-a').map((s) => s.interface), ['eth0', 'net1', 'br1']);
    assert.deepEqual(shaped(), []);
    assert.deepEqual(knictl('w1', 'networks').find((n: any) => n.name === 'macvlan-hl').attachments, []);
  });

  it('a network taking a device (k8s.v1.cni.cncf.io/resourceName) gets the one the kubelet gave the pod, as SR-IOV networks do; a pod given none waits with the reason', async () => {
    // Two "VFs" on kc-w1 (veth ends: this kernel has no dummy links), offered by a device plugin
    // registered with the real kubelet, and a plugin that moves the device it is given into the pod.
    const resource = 'kni.dev/test-nic';
    const vfs = ['a', 'b'].map((x) => `${RUN.slice(0, 9)}vf${x}`);
    const mac = (name: string, ns = 'kc-w1') => JSON.parse(execFileSync('ip', ['-n', ns, '-j', 'link', 'show', 'dev', name], { encoding: 'utf8' }))[0].address;
    for (const vf of vfs) execFileSync('ip', ['-n', 'kc-w1', 'link', 'add', vf, 'type', 'veth', 'peer', 'name', `${vf}p`]);
    const macs = vfs.map((vf) => mac(vf));
    const bin = installTestPlugin(`${CL}/w1/root/opt/cni/bin`, 'kni-test-device', 'device-cni');
    const logFile = `${CL}/device-cni.log`;
    const infoDir = `${CL}/w1/root/run/k8s.cni.cncf.io/devinfo`;
    const plugin = new TestDevicePlugin(`${CL}/w1/root/var/lib/kubelet/device-plugins`, resource, vfs, infoDir);
    try {
      await plugin.start();
      await waitFor(() => kubectlJson('get', 'node', 'kc-w1').status.allocatable?.[resource] === '2', 60_000, () => JSON.stringify(kubectlJson('get', 'node', 'kc-w1').status.allocatable));
      apply(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: vf-net, namespace: default, annotations: {k8s.v1.cni.cncf.io/resourceName: ${resource}}}
spec:
  config: '${JSON.stringify({ cniVersion: '1.0.0', name: 'vf-net', type: 'kni-test-device', capabilities: { deviceID: true, CNIDeviceInfoFile: true }, logFile })}'
`);
      const vfPod = (name: string, devices: number, selection: Record<string, unknown> = {}) =>
        MULTINET(name, 'w1', [{ name: 'vf-net', ...selection }]).replace('  imagePullPolicy: Never', `  imagePullPolicy: Never${devices ? `\n    resources: {limits: {${resource}: ${devices}}}` : ''}`);
      // vf-a names a device too: its network's resource wins (as Multus has it).
      apply([vfPod('vf-a', 1, { deviceID: 'not-the-kubelets' }), vfPod('vf-b', 1), vfPod('vf-none', 0)].join('---\n'));
      await waitFor(() => phase('vf-a') === 'Running' && phase('vf-b') === 'Running', 120_000, () => kubectl('get', 'pods', '-o', 'wide') + podEvents('vf-a') + podEvents('vf-b'));
      const given = plugin.allocated.map((ids) => ids[0]).sort();
      assert.deepEqual(given, [...vfs].sort(), 'the kubelet did not allocate both devices');
      const pods = knictl('w1', 'pods');
      const seen: string[] = [];
      for (const name of ['vf-a', 'vf-b']) {
        const pod = knictl('w1', 'pod', pods.find((p: any) => p.pod.name === name).sandbox_id);
        const net1 = pod.interfaces.find((i: any) => i.name === 'net1');
        assert.ok(vfs.includes(net1.device_id), `${name}: device ${net1.device_id}`);
        seen.push(net1.device_id);
        // The very link the kubelet's device is, now the pod's net1.
        assert.equal(net1.mac, macs[vfs.indexOf(net1.device_id)]);
        assert.match(kubectl('exec', name, '--', '/bin/busybox', 'ip', 'link', 'show', 'net1'), new RegExp(net1.mac));
      }
      assert.deepEqual(seen.sort(), [...vfs].sort(), 'both pods got the same device');
      // The device plugin's information on each device, in network-status (as Multus puts it there).
      for (const name of ['vf-a', 'vf-b']) {
        const net1 = knictl('w1', 'pod', pods.find((p: any) => p.pod.name === name).sandbox_id).interfaces.find((i: any) => i.name === 'net1');
        await waitFor(() => status(name).some((s) => s.interface === 'net1' && s['device-info']), 60_000, () => JSON.stringify(status(name)));
        assert.deepEqual(status(name).find((s) => s.interface === 'net1')['device-info'], plugin.infoOf(net1.device_id));
      }
      assert.equal(fs.readdirSync(`${infoDir}/cni`).length, 2);
      const adds = fs.readFileSync(logFile, 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((l) => l.cmd === 'ADD');
      for (const a of adds) {
        assert.deepEqual([a.pciBusID, a.runtimeConfig.deviceID], [a.deviceID, a.deviceID]);
        assert.equal(a.runtimeConfig.CNIDeviceInfoFile, `/var/run/k8s.cni.cncf.io/devinfo/cni/default-vf-net-${a.containerId}_net1`);
      }
      assert.equal(knictl('w1', 'networks').find((n: any) => n.name === 'vf-net').resource_name, resource);
      await waitFor(() => /network default\/vf-net takes one device of kni\.dev\/test-nic per attachment .*the kubelet gave pod default\/vf-none none/.test(podEvents('vf-none')), 90_000, () => podEvents('vf-none'));
      assert.equal(phase('vf-none'), 'Pending');
      // Deleted, each pod's DEL gives its device back to the node under its own name.
      kubectl('delete', 'pod', 'vf-a', 'vf-b', 'vf-none', '--wait=true', '--timeout=120s');
      for (const [i, vf] of vfs.entries()) assert.equal(mac(vf), macs[i], `${vf} is not back on kc-w1`);
      assert.deepEqual(fs.readdirSync(`${infoDir}/cni`), [], 'the attachments\' device information files are left');
    } finally {
      plugin.stop();
      for (const vf of vfs) trySh('ip', ['-n', 'kc-w1', 'link', 'del', vf]);
      fs.rmSync(bin, { force: true });
    }
  });

  it('networks.everyPod: a pod outside the system namespaces gets them before its own; editing its annotation leaves them be', async () => {
    apply('apiVersion: v1\nkind: Namespace\nmetadata: {name: every}\n');
    await waitFor(() => kubectl('-n', 'every', 'get', 'serviceaccounts').includes('default'), 60_000, () => 'no default ServiceAccount in namespace every');
    apply(MULTINET('ev-a', 'w2', [{ name: 'bridge-static', namespace: 'default', ips: ['10.252.0.31/24'] }]).replace('  name: ev-a\n', '  name: ev-a\n  namespace: every\n'));
    const inEvery = (...args: string[]) => kubectl('-n', 'every', ...args);
    const evStatus = (): any[] => JSON.parse(kubectlJson('-n', 'every', 'get', 'pod', 'ev-a').metadata.annotations?.['k8s.v1.cni.cncf.io/network-status'] ?? '[]');
    await waitFor(() => kubectlJson('-n', 'every', 'get', 'pod', 'ev-a').status.phase === 'Running' && evStatus().length === 3, 120_000, () => inEvery('get', 'pods', '-o', 'wide') + JSON.stringify(evStatus()));
    assert.deepEqual(evStatus().map((s) => [s.name, s.interface]), [['kni', 'eth0'], ['default/macvlan-hl', 'net1'], ['default/bridge-static', 'net2']]);
    inEvery('annotate', '--overwrite', 'pod', 'ev-a', 'k8s.v1.cni.cncf.io/networks=[]');
    await waitFor(() => evStatus().length === 2, 60_000, () => JSON.stringify(evStatus()));
    assert.deepEqual(evStatus().map((s) => [s.name, s.interface]), [['kni', 'eth0'], ['default/macvlan-hl', 'net1']]);
    const sandbox = knictl('w2', 'pods').find((p: any) => p.pod.name === 'ev-a');
    assert.equal(knictl('w2', 'pod', sandbox.sandbox_id).interfaces[1].selected_by, 'config');
    inEvery('delete', 'pod', 'ev-a', '--wait=true', '--timeout=120s');
    kubectl('delete', 'namespace', 'every', '--wait=false');
  });

  it('deleting the pods releases every interface and address of every network', async () => {
    kubectl('delete', 'pod', '-l', 'app=multinet', '--wait=true', '--timeout=120s');
    for (const w of WORKERS) {
      await waitFor(() => knictl(w, 'pods').length === 0, 60_000, () => JSON.stringify(knictl(w, 'pods')));
      assert.deepEqual(knictl(w, 'networks').filter((n: any) => n.attachments.length), [], `kc-${w} still has attachments`);
    }
  });
});
