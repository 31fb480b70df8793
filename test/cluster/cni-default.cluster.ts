// A cluster keeping its CNI plugins with kni in front, as Multus sits in front of one: every
// worker's default network is the chained conflist in its /etc/cni/net.d (Debian's bridge +
// host-local on the Node's podCIDR + portmap + tuning, as kindnet chains them), which kni finds
// (defaultNetwork.cni: auto), runs itself, and puts its own 00-kni.conflist before. Pods get the plugins'
// addresses, reach each other across nodes over kni's routes, a hostPort answers from its node
// and from the other node, and deleting the pods frees every lease.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { waitFor } from '../helpers/wait';
import { apply, CL, cluster, getFromNode, knictl, kniWith, kubectl, kubectlJson, POD, ready, WEB, WORKERS } from './cluster-helpers';

const leases = (w: string): string[] => {
  const d = `${CL}/${w}/root/var/lib/kni/host-local/chain`;
  return fs.existsSync(d) ? fs.readdirSync(d).filter((f) => /^\d/.test(f)) : [];
};
const webPods = () => kubectlJson('get', 'pods', '-l', 'app=web').items.filter((p: any) => p.status.phase === 'Running' && p.status.podIP);

describe('cluster: a chained CNI conflist as every node\'s default network', function () {
  this.timeout(300_000);

  before(() => {
    cluster('down');
    cluster('up');
    for (const w of WORKERS) {
      let v4 = '';
      const deadline = Date.now() + 60_000;
      while (!v4 && Date.now() < deadline) v4 = kubectl('get', 'node', `kc-${w}`, '-o', 'jsonpath={.spec.podCIDRs[0]}');
      assert.ok(v4, `kc-${w} has no podCIDR`);
      fs.writeFileSync(`${CL}/${w}/root/etc/cni/net.d/10-chain.conflist`, JSON.stringify({
        cniVersion: '1.0.0',
        name: 'chain',
        plugins: [
          { type: 'bridge', bridge: 'cni0', isGateway: true, ipMasq: true, hairpinMode: true, ipam: { type: 'host-local', dataDir: '/var/lib/kni/host-local', ranges: [[{ subnet: v4 }]], routes: [{ dst: '0.0.0.0/0' }] } },
          { type: 'portmap', capabilities: { portMappings: true } },
          { type: 'tuning', sysctl: { 'net.ipv4.conf.eth0.arp_notify': '1' } },
        ],
      }));
    }
    kniWith('defaultNetwork: { cni: auto }\n');
  });
  after(() => {
    cluster('down');
  });

  it('nodes Ready; pods get the plugins\' addresses from their node\'s podCIDR and reach pods on the other node', async () => {
    for (const n of kubectlJson('get', 'nodes').items) assert.equal(ready(n).status, 'True', n.metadata.name);
    for (const w of WORKERS) {
      assert.deepEqual(fs.readdirSync(`${CL}/${w}/root/etc/cni/net.d`).sort(), ['00-kni.conflist', '10-chain.conflist'], `kc-${w}`);
      assert.match(fs.readFileSync(`${CL}/run/kni-${w}.log`, 'utf8'), /"msg":"defaultNetwork.cni is auto: the cluster network's config found","file":"\/etc\/cni\/net.d\/10-chain.conflist"/);
    }
    apply(WEB(4));
    await waitFor(() => webPods().length === 4, 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    const pods = webPods();
    assert.deepEqual([...new Set(pods.map((p: any) => p.spec.nodeName))].sort(), ['kc-w1', 'kc-w2']);
    for (const p of pods) {
      const cidr = kubectl('get', 'node', p.spec.nodeName, '-o', 'jsonpath={.spec.podCIDRs[0]}');
      assert.ok(p.status.podIP.startsWith(cidr.split('.').slice(0, 3).join('.') + '.'), `${p.metadata.name} ${p.status.podIP} not in ${cidr}`);
    }
    const a = pods.find((p: any) => p.spec.nodeName === 'kc-w1');
    const b = pods.find((p: any) => p.spec.nodeName === 'kc-w2');
    const out = kubectl('exec', a.metadata.name, '--', '/bin/busybox', 'sh', '-c', `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 5 ${b.status.podIP} 80`);
    assert.match(out, /hello from kni e2e/);
    const sandbox = knictl('w1', 'pods').find((p: any) => p.pod.name === a.metadata.name);
    assert.equal(knictl('w1', 'pod', sandbox.sandbox_id).interfaces[0].addresses[0].address, a.status.podIP);
    // IPAM status from the plugins' config: host-local's range, with the pods it handed out.
    const ipam = knictl('w1', 'ipam').ranges;
    assert.deepEqual(ipam.map((r: any) => [r.cidr, r.used]), [[kubectl('get', 'node', 'kc-w1', '-o', 'jsonpath={.spec.podCIDRs[0]}'), String(pods.filter((p: any) => p.spec.nodeName === 'kc-w1').length)]]);
  });

  it('a hostPort (portmap through the portMappings capability) answers on its node, from that node and from the other node', async () => {
    apply(POD('hp', 'w1', { hostPort: 8080 }));
    await waitFor(() => kubectlJson('get', 'pod', 'hp').status.phase === 'Running', 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    for (const from of ['w2', 'w1']) assert.match(getFromNode(from, '10.240.0.11', 8080), /hello from kni e2e/, `hostPort from kc-${from}`);
  });

  it('deleting the pods frees every lease the plugins handed out', async () => {
    kubectl('delete', 'deployment', 'web', '--wait=true');
    kubectl('delete', 'pod', 'hp', '--wait=true');
    for (const w of WORKERS) await waitFor(() => leases(w).length === 0 && knictl(w, 'pods').length === 0, 60_000, () => `${leases(w)} ${JSON.stringify(knictl(w, 'pods'))}`);
  });
});
