// kni as the network of a real Kubernetes cluster (hack/cluster/cluster.sh: API server, controller
// manager, scheduler, two workers with containerd 2.x, kubelet and kube-proxy, each node a netns).
// kni runs from this checkout on every worker (daemonset.cluster.ts: from its image; node
// agent, cross-node traffic and Services: node-agent.cluster.ts).
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';
import { kataTap, KATA_TAP, scanNetns } from '../helpers/kata-netns';
import { guestImage, QemuGuest } from '../helpers/qemu-guest';
import { trySh } from '../helpers/sh';
import { stateRecords } from '../helpers/state-records';
import { waitFor } from '../helpers/wait';
import { apply, BIN, CL, cluster, clusterUp, getFromNode, knictl, knictlTrace, kniVeths, kubectl, kubectlJson, KUBECONFIG, POD, ready, runningPods, WEB, WORKERS } from './cluster-helpers';

describe('cluster: kni as the network of a Kubernetes cluster', function () {
  this.timeout(300_000);

  before(() => {
    cluster('down'); // whatever an earlier run left
    // kube-proxy in its nftables mode here (iptables in the other cluster tests): Services over
    // kni with either, and knictl trace reading either's rules.
    clusterUp({ KNI_CLUSTER_PROXY_MODE: 'nftables' });
  });
  after(() => {
    cluster('down');
  });

  it('nodes register NotReady ("network plugin not ready") and become Ready once kni runs on them', async () => {
    for (const n of kubectlJson('get', 'nodes').items) {
      assert.equal(ready(n).status, 'False', `${n.metadata.name} is Ready without a network`);
      assert.match(ready(n).message, /network/i);
    }
    cluster('kni');
    const nodes = kubectlJson('get', 'nodes').items;
    assert.equal(nodes.length, WORKERS.length);
    for (const n of nodes) {
      assert.equal(ready(n).status, 'True', n.metadata.name);
      assert.equal(n.spec.podCIDRs.length, 2, `${n.metadata.name} has no dual-stack podCIDRs`);
    }
  });

  it('a Deployment of 8 replicas: every pod Running on both workers with dual-stack IPs from its node\'s podCIDRs, none shared', async () => {
    apply(WEB(8));
    await waitFor(() => runningPods().length === 8, 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    const cidrs = new Map<string, string[]>(kubectlJson('get', 'nodes').items.map((n: any) => [n.metadata.name, n.spec.podCIDRs]));
    const pods = runningPods();
    assert.deepEqual([...new Set(pods.map((p: any) => p.spec.nodeName))].sort(), ['kc-w1', 'kc-w2'], 'the pods did not spread over both workers');
    const ips = pods.flatMap((p: any) => p.status.podIPs.map((x: any) => x.ip));
    assert.equal(new Set(ips).size, ips.length, 'an address is used twice');
    for (const p of pods) {
      const [v4, v6] = cidrs.get(p.spec.nodeName)!;
      assert.ok(p.status.podIPs[0].ip.startsWith(v4.split('.').slice(0, 3).join('.') + '.'), `${p.metadata.name} ${p.status.podIPs[0].ip} is not in ${v4}`);
      assert.ok(p.status.podIPs[1].ip.startsWith(v6.split('::')[0] + '::'), `${p.metadata.name} ${p.status.podIPs[1].ip} is not in ${v6}`);
    }
    // containerd passed each pod's cgroup parent (the kubelet's pod cgroup) as the CNI cgroupPath
    // capability: kni keeps it for the plugins of the pod's CNI networks.
    const records = new Map(WORKERS.map((w) => [`kc-${w}`, stateRecords(`${CL}/${w}/root/var/lib/kni`, 'sandboxes')]));
    for (const p of pods) {
      const rec = [...records.get(p.spec.nodeName)!.values()].find((r: any) => r.pod.uid === p.metadata.uid);
      assert.match(rec?.cgroupParent ?? '', new RegExp(`kubepods.*pod${p.metadata.uid.replace(/-/g, '[-_]')}`), `${p.metadata.name}: ${JSON.stringify(rec?.cgroupParent)}`);
    }
  });

  it('pods on one node reach each other over HTTP (IPv4 and IPv6)', () => {
    const pods = runningPods();
    for (const node of ['kc-w1', 'kc-w2']) {
      const here = pods.filter((p: any) => p.spec.nodeName === node);
      assert.ok(here.length >= 2, `fewer than two pods on ${node}`);
      for (const ip of here[1].status.podIPs.map((x: any) => x.ip)) {
        // busybox nc, not wget: Debian's static busybox wget crashes on some options.
        const out = kubectl('exec', here[0].metadata.name, '--', '/bin/busybox', 'sh', '-c', `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc ${ip.includes(':') ? `${ip}` : ip} 80`);
        assert.match(out, /hello from kni e2e/, `${here[0].metadata.name} → ${ip}`);
      }
    }
  });

  it('pods on different nodes reach each other over HTTP (IPv4 and IPv6) through host-gw routes (the nodes share a subnet)', () => {
    const pods = runningPods();
    const a = pods.find((p: any) => p.spec.nodeName === 'kc-w1');
    const b = pods.find((p: any) => p.spec.nodeName === 'kc-w2');
    for (const [from, to] of [[a, b], [b, a]]) {
      for (const ip of to.status.podIPs.map((x: any) => x.ip)) {
        const out = kubectl('exec', from.metadata.name, '--', '/bin/busybox', 'sh', '-c', `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 5 ${ip} 80`);
        assert.match(out, /hello from kni e2e/, `${from.metadata.name} (${from.spec.nodeName}) → ${ip}`);
      }
    }
    for (const w of WORKERS) {
      const routes = knictl(w, 'node').cluster.peers.flatMap((p: any) => p.routes);
      assert.deepEqual(routes.map((r: any) => [r.backend, r.state]), [['host-gw', 'installed'], ['host-gw', 'installed']], `kc-${w}`);
    }
  });

  it('a NodePort Service, kube-proxy in its nftables mode: its ClusterIP answers from a pod over IPv4 and IPv6 and from each node (over IPv6 the node has no route: the trace says so), its NodePort from the node; knictl trace names its Service, its endpoints and kube-proxy\'s map elements, and says when one is gone', async () => {
    apply(`apiVersion: v1
kind: Service
metadata: {name: web}
spec: {type: NodePort, selector: {app: web}, ipFamilyPolicy: PreferDualStack, ports: [{port: 80, nodePort: 30080}]}
`);
    const ips = kubectlJson('get', 'service', 'web').spec.clusterIPs as string[];
    assert.equal(ips.length, 2);
    const from = runningPods().find((p: any) => p.spec.nodeName === 'kc-w1');
    const get = (ip: string) => kubectl('exec', from.metadata.name, '--', '/bin/busybox', 'sh', '-c', `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 5 ${ip} 80`);
    for (const ip of ips) {
      await waitFor(() => /hello from kni e2e/.test(get(ip)), 30_000, () => `${from.metadata.name} → Service ${ip}`);
      for (let i = 0; i < 6; i++) assert.match(get(ip), /hello from kni e2e/, `${from.metadata.name} → Service ${ip}`);
      let t: any;
      await waitFor(() => (t = knictlTrace('w1', from.metadata.name, ip)).ok && /of its 8 ready/.test(t.hops[1].what), 30_000, () => JSON.stringify(t));
      assert.equal(t.kind, 'service');
      assert.match(t.hops[1].what, /^\S+ is Service default\/web's ClusterIP \(ServiceCIDR kubernetes \S+; 80\/TCP\): the node's service proxy rewrites it to one of its 8 ready endpoints; kube-proxy \(nftables mode\) has taken it up on this node$/);
      // Eight endpoints traced, each from kc-w1: a pod here, or over kni's host-gw route to kc-w2's.
      const endpoints = t.hops.filter((h: any) => h.what.startsWith('endpoint '));
      assert.equal(endpoints.length, 8, JSON.stringify(t));
      assert.ok(endpoints.every((h: any) => / on this node \(sandbox | is in node kc-w2's podCIDR \S+: kni's host-gw route /.test(h.what)), JSON.stringify(endpoints));
    }
    // From each node itself: over IPv4 (a default route), and over IPv6 the node has no route to
    // the ClusterIP (no IPv6 default route here): its own packets are refused before kube-proxy
    // rewrites them, and the trace says so.
    for (const w of WORKERS) assert.match(getFromNode(w, ips[0], 80), /hello from kni e2e/, `kc-${w} → Service ${ips[0]}`);
    assert.equal(knictlTrace('w1', '--from-node', ips[0]).ok, true);
    const refused = spawnSync('ip', ['netns', 'exec', 'kc-w1', 'timeout', '10', 'bash', '-c', `exec 3<>/dev/tcp/${ips[1]}/80`], { encoding: 'utf8' });
    assert.match(refused.stderr, /Network is unreachable/);
    const unrouted = knictlTrace('w1', '--from-node', ips[1]);
    assert.deepEqual([unrouted.kind, unrouted.ok], ['service', false], JSON.stringify(unrouted));
    assert.equal(unrouted.hops[0].problem, `the node has no route to ${ips[1]}: its own packets need one before kube-proxy rewrites them (a default route, or one to the Service range)`);
    // Its NodePort on kc-w1's address: kube-proxy's element in service-nodeports (and the address
    // in nodeport-ips), then the endpoints.
    const w1 = kubectlJson('get', 'node', 'kc-w1').status.addresses.find((a: any) => a.type === 'InternalIP' && !a.address.includes(':')).address;
    assert.match(getFromNode('w1', w1, 30080), /hello from kni e2e/, `kc-w1 → its NodePort ${w1}:30080`);
    const np = knictlTrace('w1', '--from-node', w1, '--port', '30080');
    assert.deepEqual([np.kind, np.ok, np.hops.filter((h: any) => h.what.startsWith('endpoint ')).length], ['node-port', true, 8], JSON.stringify(np));
    assert.match(np.hops[0].what, new RegExp(`^${w1.replace(/\./g, '\\.')} port 30080/TCP is Service default/web's NodePort \\(its port 80/TCP\\): the node's service proxy rewrites it to one of its 8 ready endpoints; kube-proxy \\(nftables mode\\) has taken it up on this node$`));
    // The IPv4 element taken out of kube-proxy's map on kc-w2 behind its back: a trace from there
    // says so (kube-proxy puts it back at its next sync: taken out again if that came first).
    const there = runningPods().find((p: any) => p.spec.nodeName === 'kc-w2');
    let lost: any;
    await waitFor(() => {
      execFileSync('ip', ['netns', 'exec', 'kc-w2', 'nft', 'delete', 'element', 'ip', 'kube-proxy', 'service-ips', `{ ${ips[0]} . tcp . 80 }`], { stdio: 'pipe' });
      return !(lost = knictlTrace('w2', there.metadata.name, ips[0])).ok;
    }, 30_000, () => JSON.stringify(lost));
    assert.equal(lost.hops[1].problem, `kube-proxy (nftables mode) has no element in its service-ips map for ${ips[0]} on this node: it has not synced this Service (is kube-proxy running here? its log says why)`);
    kubectl('delete', 'service', 'web');
  });

  it('a hostPort on the built-in network (the kubelet\'s port mapping through containerd) answers from its node and from the other node, and goes with the pod', async () => {
    apply(POD('hostport', 'w1', { hostPort: 8080 }));
    await waitFor(() => kubectlJson('get', 'pod', 'hostport').status.phase === 'Running', 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    for (const w of ['w2', 'w1']) assert.match(getFromNode(w, '10.240.0.11', 8080), /hello from kni e2e/, `hostPort 8080 from kc-${w}`);
    kubectl('delete', 'pod', 'hostport', '--wait=true');
    assert.doesNotMatch(execFileSync('ip', ['netns', 'exec', 'kc-w1', 'iptables', '-t', 'nat', '-S'], { encoding: 'utf8' }), /8080/);
  });

  it('knictl on each worker lists exactly the pods the API server places on that node', () => {
    const pods = runningPods();
    for (const w of WORKERS) {
      const want = pods.filter((p: any) => p.spec.nodeName === `kc-${w}`).map((p: any) => `${p.metadata.namespace}/${p.metadata.name}`).sort();
      assert.ok(want.length > 0);
      const have = knictl(w, 'pods').map((p: any) => `${p.pod.namespace}/${p.pod.name}`).sort();
      assert.deepEqual(have, want, `kc-${w}`);
    }
  });

  it('a pod whose veth someone deleted is wired again at once (the kernel\'s notice starts a reconcile), serves again, and its events say so (kubectl describe pod)', async () => {
    const pod = runningPods().find((p: any) => p.spec.nodeName === 'kc-w1');
    const sandbox = knictl('w1', 'pods').find((p: any) => p.pod.name === pod.metadata.name);
    execFileSync('ip', ['-n', 'kc-w1', 'link', 'del', sandbox.interfaces[0].host_interface]);
    const events = () => kubectlJson('get', 'events', '--field-selector', `involvedObject.name=${pod.metadata.name},reason=NetworkRepaired`).items.map((e: any) => e.message).join('\n');
    await waitFor(() => /kni found this pod's network changed behind its back \(.*host veth \S+ is missing.*\) and wired it again with the same addresses/.test(events()), 30_000, () => events());
    // Before anyone asked, and before the sweep (60 s): on the kernel's notice of the delete.
    assert.match(execFileSync('cat', [`${CL}/run/kni-w1.log`], { encoding: 'utf8' }), /"msg":"the kernel says a pod's host veth, its route or the bridge was deleted or set down: reconciling now"/);
    assert.match(getFromNode('w2', pod.status.podIP, 80), /hello from kni e2e/);
  });

  it("the node's conntrack table 90 % full: knictl node warns what to raise, and the Node says so too (kubectl describe node)", async () => {
    // 3,000 entries in kc-w1's netns, the limit (global) lowered to put them at 93 % for one
    // reconcile and put back at once: every other netns here holds far fewer.
    const send = "const s = require('dgram').createSocket('udp4'); let n = 0; const next = () => (n === 3000 ? s.close() : s.send('x', 20000 + n++, '127.0.0.1', next)); next();";
    execFileSync('ip', ['netns', 'exec', 'kc-w1', process.execPath, '-e', send]);
    const count = Number(execFileSync('ip', ['netns', 'exec', 'kc-w1', 'cat', '/proc/sys/net/netfilter/nf_conntrack_count'], { encoding: 'utf8' }));
    const MAX = '/proc/sys/net/netfilter/nf_conntrack_max';
    const saved = fs.readFileSync(MAX, 'utf8').trim();
    try {
      fs.writeFileSync(MAX, String(Math.ceil(count / 0.93)));
      knictl('w1', 'reconcile');
    } finally {
      fs.writeFileSync(MAX, saved);
    }
    assert.ok(knictl('w1', 'node').warnings.some((w: string) => w.startsWith('the connection tracking table is 90% full or more')), JSON.stringify(knictl('w1', 'node').warnings));
    const events = () => kubectlJson('get', 'events', '--field-selector', 'involvedObject.name=kc-w1,reason=NodeNetworkWarning').items.map((e: any) => `${e.type} ${e.message}`).join('\n');
    await waitFor(() => /^Warning the connection tracking table is 90% full or more \(of its \d+ entries; kni_conntrack_entries has the count\): once full/m.test(events()), 30_000, events);
    knictl('w1', 'reconcile');
    assert.ok(!knictl('w1', 'node').warnings.some((w: string) => /connection tracking/.test(w)));
  });

  it('kni killed (kill -9) on a worker while pods are being created: no pod stuck, nothing leaked, knictl agrees after the restart', async () => {
    apply(WEB(16));
    const pid = Number(execFileSync('cat', [`${CL}/run/kni-w1.pid`], { encoding: 'utf8' }));
    process.kill(pid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 1500));
    cluster('kni'); // starts kni again (on w1 it was dead; w2's keeps running)
    await waitFor(() => runningPods().length === 16, 180_000, () => kubectl('get', 'pods', '-o', 'wide'));
    for (const w of WORKERS) {
      const onNode = runningPods().filter((p: any) => p.spec.nodeName === `kc-${w}`).length;
      await waitFor(() => knictl(w, 'pods').length === onNode, 60_000, () => `kni on ${w} lists ${knictl(w, 'pods').length}, the node runs ${onNode}`);
      assert.equal(kniVeths(w).length, onNode, `veths on kc-${w}`);
    }
  });

  it('a RuntimeClass whose handler kni maps to vm (containerd runtime "kata", backed by runc here): its pod is wired as a vm sandbox, and a QEMU guest started on it as Kata would reaches a pod on the other node through kni\'s routes, and is reached from it', async () => {
    const YAML = (await import('yaml')).default;
    const fs = await import('node:fs');
    const docs = YAML.parseAllDocuments(fs.readFileSync(path.join(packageRoot(), 'kind-config/runtimeclass-kata.yaml'), 'utf8')).map((d) => d.toJS());
    const rc = docs.find((d) => d.kind === 'RuntimeClass');
    const example = docs.find((d) => d.kind === 'Pod');
    apply(YAML.stringify(rc));
    // The shipped example pod, on the image built here.
    example.metadata.name = 'vm-pod';
    example.spec.containers[0] = { name: 'app', image: 'kni.local/e2e:1', imagePullPolicy: 'Never', command: ['/pause'] };
    example.spec.terminationGracePeriodSeconds = 1;
    apply(YAML.stringify(example));
    let guest: QemuGuest | undefined;
    try {
      await waitFor(() => kubectlJson('get', 'pod', 'vm-pod').status.phase === 'Running', 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
      const p = kubectlJson('get', 'pod', 'vm-pod');
      const w = p.spec.nodeName.replace(/^kc-/, '');
      const rec = knictl(w, 'pods').find((x: any) => x.pod?.name === 'vm-pod');
      assert.ok(rec, `kni on ${p.spec.nodeName} does not know vm-pod`);
      assert.equal(knictl(w, 'pod', rec.sandbox_id).kind, 'vm');
      assert.equal(rec.interfaces[0].addresses[0].address, p.status.podIPs[0].ip);

      // What Kata's runtime would do next, in the pod netns as the node sees it: a tap joined to
      // eth0, and a guest that takes eth0's addresses, routes and neighbours.
      const enter = ['nsenter', `--mount=${CL}/mnt/${w}`, 'nsenter', `--net=${rec.netns_path}`];
      const run = (cmd: string, args: string[]) => trySh(enter[0], [...enter.slice(1), cmd, ...args]);
      kataTap(run, rec.interfaces[0].mtu);
      const net = scanNetns(run);
      guest = await QemuGuest.boot(guestImage(), 'kc-vm-pod', enter, KATA_TAP, net.mac);
      await guest.configure(net);
      const other = runningPods().find((x: any) => x.spec.nodeName !== p.spec.nodeName);
      assert.ok(other, `no web pod on a node other than ${p.spec.nodeName}`);
      for (const ip of other.status.podIPs.map((x: any) => x.ip)) {
        assert.ok(await guest.ping(ip), `the guest on ${p.spec.nodeName} cannot ping ${other.metadata.name} (${ip}) on ${other.spec.nodeName}`);
        assert.match(await guest.must(`printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc ${ip} 80`), /hello from kni e2e/, `the guest → ${ip}:80`);
      }
      for (const ip of p.status.podIPs.map((x: any) => x.ip)) {
        await waitFor(() => spawnSync(`${BIN}/kubectl`, ['--kubeconfig', KUBECONFIG, 'exec', other.metadata.name, '--', '/bin/busybox', 'ping', '-c', '1', '-W', '3', ip]).status === 0, 60_000, () => `${other.metadata.name} on ${other.spec.nodeName} cannot ping the guest at ${ip}`);
      }
    } finally {
      guest?.kill();
      kubectl('delete', 'pod', 'vm-pod', '--wait=true');
    }
  });

  it('deleting the Deployment leaves no veth, netns, address or record on any node', async () => {
    kubectl('delete', 'deployment', 'web', '--wait=true');
    await waitFor(() => kubectlJson('get', 'pods', '-l', 'app=web').items.length === 0, 120_000, () => kubectl('get', 'pods'));
    for (const w of WORKERS) {
      await waitFor(() => knictl(w, 'pods').length === 0 && kniVeths(w).length === 0, 60_000, () => `kc-${w}: ${knictl(w, 'pods').length} pods, veths ${kniVeths(w).join(',')}`);
      for (const r of knictl(w, 'ipam').ranges) assert.equal(r.used, '0', `kc-${w} ${r.cidr}`);
      const netns = execFileSync('sh', ['-c', `ls ${CL}/${w}/root/run/containerd/*/netns 2>/dev/null | wc -l`], { encoding: 'utf8' }).trim();
      assert.equal(netns, '0', `netns pins left on kc-${w}`);
      assert.deepEqual([...stateRecords(`${CL}/${w}/root/var/lib/kni`, 'sandboxes').keys()], [], `records left on kc-${w}`);
    }
  });
});
