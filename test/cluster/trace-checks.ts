// What knictl trace says in the node-agent cluster (node-agent.cluster.ts sets up the pods and
// Services and calls these): a pod on the other node, as far as that node's kni delivers it (a
// host veth deleted there named from here); a ClusterIP followed to its Service and endpoints, by name too; the
// NetworkPolicies on the path judged; from a node itself; a NodePort; what stops a packet to a Service
// (kube-proxy's rule gone in iptables and IPVS mode, internalTrafficPolicy Local, no endpoint, no
// Service).
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';
import { waitFor } from '../helpers/wait';
import { apply, CL, getFromNode, knictl, knictlTrace, kubectl, kubectlJson } from './cluster-helpers';
import { fetchFrom } from './whoami';

/**
 * From who-1 (kc-w1) to who-2 (kc-w2) at its addresses `ips` (IPv4 first): who-1's route, kni's
 * vxlan route to kc-w2's pods, and how kc-w2 delivers it; then to kc-w2 itself.
 */
export async function traceToPeerPod(ips: string[]): Promise<void> {
  const [b4] = ips;
  for (const ip of ips) {
    const t = knictl('w1', 'trace', 'who-1', ip);
    assert.deepEqual([t.kind, t.ok, t.hops.map((h: any) => h.at)], ['peer-pod', true, ['pod', 'node', 'kc-w2']], JSON.stringify(t));
    // How kc-w2 delivers it, as kc-w2's kni says (asked over the probe's port).
    assert.match(t.hops[2].what, /^pod default\/who-2 on this node \(sandbox \S+, eth0\), through host veth \S+$/);
    // The vxlan device's MTU is the underlay's less the encapsulation; the pods keep the underlay's.
    assert.match(t.hops[1].what, new RegExp(`^${ip} is in node kc-w2's podCIDR \\S+: kni's vxlan route \\S+ dev \\S+; MTU 14[35]0: a pod's larger packets \\(its MTU is 1500\\) are answered "fragmentation needed" by this node, and path MTU discovery sends them smaller$`));
  }
  // who-2's host veth deleted on kc-w2: a trace from kc-w1 says so at kc-w2; kc-w2's reconcile
  // wires it again. Repairs on the kernel's notice are off meanwhile (repairOnNotice, a live
  // setting), or the veth would be back before the trace.
  const original: string = kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-config').data['config.yaml'];
  const applied = () => execFileSync('cat', [`${CL}/run/kni-w2.log`], { encoding: 'utf8' }).split('\n').filter((l) => l.includes('"msg":"config changed live"') && l.includes('repairOnNotice')).length;
  const edit = async (text: string): Promise<void> => {
    const before = applied();
    kubectl('-n', 'kube-system', 'patch', 'configmap', 'kni-config', '--type', 'merge', '-p', JSON.stringify({ data: { 'config.yaml': text } }));
    await waitFor(() => applied() > before, 30_000, () => 'kni on kc-w2 did not apply repairOnNotice');
  };
  await edit(`${original}\nrepairOnNotice: false\n`);
  const veth = knictl('w2', 'pods').find((p: any) => p.pod.name === 'who-2').interfaces[0].host_interface;
  execFileSync('ip', ['-n', 'kc-w2', 'link', 'del', veth]);
  try {
    const broken = knictlTrace('w1', 'who-1', b4);
    assert.equal(broken.ok, false, JSON.stringify(broken));
    assert.match(broken.hops[2].what, new RegExp(`through host veth ${veth} \\(missing\\)$`));
    assert.match(broken.hops[2].problem, /^its network does not match kni's record: .*\(knictl reconcile repairs it\)$/);
  } finally {
    knictl('w2', 'reconcile');
    await edit(original);
  }
  assert.equal(knictlTrace('w1', 'who-1', b4).ok, true);
  const w2 = knictl('w1', 'node').cluster.peers.find((p: any) => p.name === 'kc-w2').internal_ips[0];
  const toNode = knictl('w1', 'trace', 'who-1', w2);
  assert.deepEqual([toNode.kind, toNode.ok], ['peer-node', true], JSON.stringify(toNode));
  assert.match(toNode.hops[1].what, new RegExp(`^${w2.replace(/\\./g, '\\\\.')} is node kc-w2's InternalIP: the node routes it .*; masqueraded to the node's address \\(nftables inet kni-masquerade\\)$`));
}

/** From who-1 (kc-w1) to Service whoami's ClusterIPs (`svc`; endpoints who-1 and who-2) and by name; who-2's IPv4 address `b4`. */
export async function traceToService(svc: string[], b4: string): Promise<void> {
  // knictl trace to a ClusterIP: its Service (through its IPAddress object), kube-proxy's rule
  // on this node, then each ready endpoint's path: who-1 itself here, who-2 over vxlan.
  // An address outside, knowing the Service ranges, is no Service's.
  for (const ip of svc) {
    let t: any;
    await waitFor(() => (t = knictlTrace('w1', 'who-1', ip)).ok, 30_000, () => JSON.stringify(t));
    assert.equal(t.kind, 'service');
    assert.match(t.hops[1].what, new RegExp(`^${ip.replace(/\./g, '\\.')} is Service default/whoami's ClusterIP \\(ServiceCIDR kubernetes \\S+; 80/TCP\\): the node's service proxy rewrites it to one of its 2 ready endpoints; kube-proxy \\(iptables mode\\) has taken it up on this node$`));
    const endpoints = t.hops.slice(2).map((h: any) => `${h.at} ${h.what}`).sort();
    assert.equal(endpoints.length, 3, JSON.stringify(t));
    assert.match(endpoints[0], /^kc-w2 pod default\/who-2 on this node \(sandbox \S+, eth0\), through host veth \S+$/);
    assert.match(endpoints[1], /^node endpoint default\/who-1: pod default\/who-1 on this node \(sandbox \S+, eth0\), through host veth \S+$/);
    assert.match(endpoints[2], /^node endpoint default\/who-2: \S+ is in node kc-w2's podCIDR \S+: kni's vxlan route/);
  }
  // The same by name (the daemon reads the Service's and the pod's addresses), and names that
  // are not there, or have no ClusterIP: a precise refusal.
  const byName = knictlTrace('w1', 'who-1', 'service/default/whoami');
  assert.deepEqual([byName.destination, byName.kind, byName.ok], [svc[0], 'service', true], JSON.stringify(byName));
  const podByName = knictlTrace('w1', 'who-1', 'pod/default/who-2');
  assert.deepEqual([podByName.destination, podByName.kind], [b4, 'peer-pod'], JSON.stringify(podByName));
  const knictlRaw = (...args: string[]) => spawnSync(process.execPath, [path.join(packageRoot(), 'dist/plugin/knictl.js'), '--socket', `${CL}/w1/root/run/kni/kni.sock`, ...args], { encoding: 'utf8' });
  assert.match(knictlRaw('trace', 'who-1', 'svc/default/whoami').stdout, new RegExp(`^svc/default/whoami is ${svc[0].replace(/\./g, '\\.')}\npod: route to `));
  assert.match(knictlRaw('trace', 'who-1', 'service/default/nope').stderr, /^knictl: NOT_FOUND: service default\/nope does not exist$/m);
  apply(`apiVersion: v1
kind: Service
metadata: {name: headless}
spec: {clusterIP: None, selector: {app: whoami}, ports: [{port: 80}]}
`);
  assert.match(knictlRaw('trace', 'who-1', 'service/default/headless').stderr, /^knictl: FAILED_PRECONDITION: service default\/headless is headless \(no ClusterIP\): its name resolves to its pods' addresses, trace one of its pods$/m);
  kubectl('delete', 'service', 'headless');
}

/** NetworkPolicies on the paths between who-1, who-2 and Service whoami (`svc`); who-2's IPv6 address `b6`. */
export function traceNetworkPolicies(svc: string[], b6: string): void {
  // The NetworkPolicies on the path, judged with kni's policy model (the one its table is written
  // from; nothing here sends through them). who-1 may send to pods of
  // its namespace (a namespaceSelector: the namespace's labels read) on 80 only; whoami pods
  // take 80 from who-1 only.
  apply(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-in}
spec: {podSelector: {matchLabels: {app: whoami}}, policyTypes: [Ingress], ingress: [{from: [{podSelector: {matchLabels: {who: one}}}], ports: [{port: 80}]}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: one-out}
spec:
  podSelector: {matchExpressions: [{key: who, operator: In, values: [one]}]}
  policyTypes: [Egress]
  egress: [{to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: default}}}], ports: [{port: 80}]}]
`);
  const policyHops = (t: any) => t.hops.filter((h: any) => /^NetworkPolic/.test(h.what)).map((h: any) => `${h.at} ${h.what}${h.problem ? ` PROBLEM ${h.problem}` : ''}`).sort();
  const only = ' on 80/TCP only (knictl trace --port checks one)';
  const policed = knictlTrace('w1', 'who-1', svc[0]);
  assert.equal(policed.ok, true, JSON.stringify(policed));
  assert.deepEqual(policyHops(policed), [
    `kc-w2 NetworkPolicy default/web-in selects pod default/who-2 for ingress; default/web-in allows it from pod default/who-1${only}`,
    // who-1 is one of the endpoints: what a pod sends itself always passes.
    "node NetworkPolicy default/web-in selects pod default/who-1 for ingress; what passes from a pod to itself is never a policy's to stop",
    `pod NetworkPolicy default/one-out selects pod default/who-1 for egress; default/one-out allows it to pod default/who-2${only}`,
    "pod NetworkPolicy default/one-out selects pod default/who-1 for egress; what passes from a pod to itself is never a policy's to stop",
  ], JSON.stringify(policed));
  // Each endpoint's egress hop comes before it, its ingress hop after it.
  const i = policed.hops.findIndex((h: any) => /^endpoint default\/who-2:/.test(h.what));
  const around = policed.hops.slice(i - 1, i + 3).map((h: any) => `${h.at} ${h.what}`);
  [/^pod NetworkPolicy default\/one-out .* to pod default\/who-2 /, /^node endpoint default\/who-2: /, /^kc-w2 pod default\/who-2 on this node /, /^kc-w2 NetworkPolicy default\/web-in selects pod default\/who-2 for ingress/].forEach((re, k) => assert.match(around[k] ?? '', re, JSON.stringify(policed)));
  // To the Service's port: each endpoint's port named; to one it lacks: nothing answers.
  const on80 = knictlTrace('w1', 'who-1', svc[0], '--port', '80');
  assert.equal(on80.ok, true, JSON.stringify(on80));
  assert.deepEqual(on80.hops.filter((h: any) => /^endpoint /.test(h.what)).map((h: any) => h.what.split(':')[0]).sort(), ['endpoint default/who-1 (port 80/TCP)', 'endpoint default/who-2 (port 80/TCP)']);
  assert.ok(policyHops(on80).every((h: string) => h.endsWith(' on 80/TCP') || h.endsWith(' to itself is never a policy\'s to stop')), JSON.stringify(policyHops(on80)));
  const on81 = knictlTrace('w1', 'who-1', svc[0], '--port', '81');
  assert.deepEqual([on81.ok, on81.hops.length, on81.hops[1].problem], [false, 2, 'Service default/whoami has no port 81/TCP (it has 80/TCP): kube-proxy rewrites none of it, nothing answers'], JSON.stringify(on81));
  // who-2 is no who-1: what it sends who-1 is dropped by kni's policy (web-in).
  const toPod = knictlTrace('w2', 'who-2', 'pod/default/who-1', '--port', '80');
  assert.equal(toPod.ok, false, JSON.stringify(toPod));
  assert.deepEqual(toPod.hops[toPod.hops.length - 1], { at: 'kc-w1', what: 'NetworkPolicy default/web-in selects pod default/who-1 for ingress', problem: "it allows nothing sent from pod default/who-2 on 80/TCP: kni's policy drops it" });
  // By address (the pod looked up by it): the same verdicts.
  const byIp = knictlTrace('w1', 'who-1', b6);
  assert.deepEqual(policyHops(byIp), [
    `kc-w2 NetworkPolicy default/web-in selects pod default/who-2 for ingress; default/web-in allows it from pod default/who-1${only}`,
    `pod NetworkPolicy default/one-out selects pod default/who-1 for egress; default/one-out allows it to pod default/who-2${only}`,
  ], JSON.stringify(byIp));
  // Outside the cluster: no pod, so no namespace of its; one-out lets nothing out there.
  const out = knictlTrace('w1', 'who-1', '10.240.0.1');
  assert.deepEqual(out.hops[1], { at: 'pod', what: 'NetworkPolicy default/one-out selects pod default/who-1 for egress', problem: "it allows nothing sent to 10.240.0.1: kni's policy drops it" }, JSON.stringify(out));
  // From the nodes: its own node always reaches a pod (the kubelet's probes); another node is
  // only an address, which web-in does not allow.
  const ownNode = knictlTrace('w1', '--from-node', 'pod/default/who-1');
  assert.equal(ownNode.ok, true, JSON.stringify(ownNode));
  assert.equal(ownNode.hops[ownNode.hops.length - 1].what, "NetworkPolicy default/web-in selects pod default/who-1 for ingress; what passes between a pod and its own node is never a policy's to stop");
  const otherNode = knictlTrace('w2', '--from-node', 'pod/default/who-1');
  assert.equal(otherNode.ok, false, JSON.stringify(otherNode));
  assert.match(otherNode.hops[otherNode.hops.length - 1].problem, /^it allows nothing sent from node \S+: kni's policy drops it$/);
  kubectl('delete', 'networkpolicy', 'web-in', 'one-out');
}

/** From the nodes themselves to Service whoami, and from who-1 to an address outside the cluster. */
export function traceFromNode(svc: string[]): void {
  // From kc-w2 itself (as its kubelet or a host-network pod sends): the same Service, who-2 here.
  const fromNode = knictlTrace('w2', '--from-node', svc[0]);
  assert.deepEqual([fromNode.kind, fromNode.ok, fromNode.hops.length], ['service', true, 4], JSON.stringify(fromNode));
  assert.match(fromNode.hops[0].what, /^\S+ is Service default\/whoami's ClusterIP /);
  assert.ok(fromNode.hops.some((h: any) => /^endpoint default\/who-2: pod default\/who-2 on this node/.test(h.what)), JSON.stringify(fromNode));
  const host = knictl('w1', 'trace', 'who-1', '10.240.0.1');
  assert.equal(host.kind, 'outside', JSON.stringify(host));
  assert.doesNotMatch(host.hops[1].what, /Service/);
}

/**
 * A NodePort (kube-proxy's iptables mode here): on a node's own address it is the Service, each
 * endpoint traced; to another node's address that node's kube-proxy takes it; a port nothing
 * takes is refused.
 */
export async function traceNodePort(): Promise<void> {
  apply(`apiVersion: v1
kind: Service
metadata: {name: who-np}
spec: {type: NodePort, selector: {app: whoami}, ports: [{name: web, port: 8080, targetPort: 80, nodePort: 30081}]}
`);
  const internal = (w: string) => kubectlJson('get', 'node', `kc-${w}`).status.addresses.find((a: any) => a.type === 'InternalIP' && !a.address.includes(':')).address as string;
  const [w1, w2] = [internal('w1'), internal('w2')];
  // An answer (busybox httpd's 404 for /): the NodePort takes it to a pod.
  await waitFor(() => /^HTTP\/1\.[01] /.test(getFromNode('w1', w1, 30081)), 30_000, () => `kc-w1 → its NodePort: ${getFromNode('w1', w1, 30081)}`);
  const t = knictlTrace('w1', '--from-node', w1, '--port', '30081');
  assert.deepEqual([t.kind, t.ok], ['node-port', true], JSON.stringify(t));
  assert.equal(t.hops[0].what, `${w1} port 30081/TCP is Service default/who-np's NodePort (its port web 8080/TCP): the node's service proxy rewrites it to one of its 2 ready endpoints; kube-proxy (iptables mode) has taken it up on this node`);
  assert.deepEqual(t.hops.filter((h: any) => /^endpoint /.test(h.what)).map((h: any) => h.what.split(':')[0]).sort(), ['endpoint default/who-1 (port 80/TCP)', 'endpoint default/who-2 (port 80/TCP)'], 'the Service port web 8080 is the pods\' 80');
  // From who-1 to kc-w2's address: kc-w2's kube-proxy takes it there.
  const there = knictlTrace('w1', 'who-1', w2, '--port', '30081');
  assert.deepEqual([there.kind, there.ok], ['peer-node', true], JSON.stringify(there));
  assert.match(there.hops[1].what, new RegExp(`; port 30081/TCP is Service default/who-np's NodePort: node kc-w2's service proxy sends it to one of its endpoints \\(knictl trace --from-node ${w2.replace(/\./g, '\\.')} --port 30081/tcp on kc-w2 traces it there\\)$`));
  kubectl('delete', 'service', 'who-np');
  // Nothing takes it now: a connection is refused, and the trace says why.
  const gone = knictlTrace('w1', '--from-node', w1, '--port', '30081');
  assert.deepEqual([gone.kind, gone.ok, gone.hops[0].problem], ['node', false, "nothing on this node takes 30081/TCP: no pod's host port, no Service's NodePort, no socket listening on it (a connection is refused)"], JSON.stringify(gone));
}

/** What stops a packet to Service who-one (`whoOne`, its only endpoint who-1 on kc-w1), and to Services without endpoints or none at all. */
export async function traceServiceProblems(whoOne: string[]): Promise<void> {
  // Its rule taken out of kc-w2's KUBE-SERVICES behind kube-proxy's back: a trace from there says
  // kube-proxy has not taken it up (kube-proxy puts it back at its next sync: taken out again if
  // that came first).
  let lost: any;
  await waitFor(() => {
    const rules = execFileSync('ip', ['netns', 'exec', 'kc-w2', 'iptables', '-t', 'nat', '-S', 'KUBE-SERVICES'], { encoding: 'utf8' }).split('\n').filter((l) => l.includes(` -d ${whoOne[0]}/32 `));
    // As printed, quotes around the comment included: a shell reads it back.
    for (const r of rules) execFileSync('ip', ['netns', 'exec', 'kc-w2', 'sh', '-c', `iptables -t nat ${r.replace(/^-A /, '-D ')}`]);
    return !(lost = knictlTrace('w2', 'who-2', whoOne[0])).ok;
  }, 30_000, () => JSON.stringify(lost));
  assert.equal(lost.hops[1].problem, `kube-proxy (iptables mode) has no rule in the nat table's KUBE-SERVICES chain for ${whoOne[0]} on this node: it has not synced this Service (is kube-proxy running here? its log says why)`);
  // kube-proxy's IPVS mode, as it leaves a node: every ClusterIP an address of the dummy link
  // kube-ipvs0 (made by hand on kc-w2, as a bridge: this kernel has neither IPVS nor dummy
  // links; kni goes by the name). That address is a Service's, not the node's own; gone from
  // the link, kube-proxy has not taken the Service up.
  execFileSync('ip', ['-n', 'kc-w2', 'link', 'add', 'kube-ipvs0', 'type', 'bridge']);
  try {
    execFileSync('ip', ['-n', 'kc-w2', 'addr', 'add', `${whoOne[0]}/32`, 'dev', 'kube-ipvs0']);
    const ipvs = knictlTrace('w2', 'who-2', whoOne[0]);
    assert.deepEqual([ipvs.kind, ipvs.ok], ['service', true], JSON.stringify(ipvs));
    assert.match(ipvs.hops[1].what, /: the node's service proxy rewrites it to its only ready endpoint; kube-proxy \(ipvs mode\) has taken it up on this node$/);
    execFileSync('ip', ['-n', 'kc-w2', 'addr', 'del', `${whoOne[0]}/32`, 'dev', 'kube-ipvs0']);
    assert.equal(knictlTrace('w2', 'who-2', whoOne[0]).hops[1].problem, `kube-proxy (ipvs mode) has no address on kube-ipvs0 for ${whoOne[0]} on this node: it has not synced this Service (is kube-proxy running here? its log says why)`);
  } finally {
    execFileSync('ip', ['-n', 'kc-w2', 'link', 'del', 'kube-ipvs0']);
  }
  // internalTrafficPolicy Local: who-one's only endpoint is on kc-w1, so from kc-w2 kube-proxy
  // drops it (seen), and the trace from there says why; from kc-w1 it answers.
  kubectl('patch', 'service', 'who-one', '-p', '{"spec":{"internalTrafficPolicy":"Local"}}');
  await waitFor(() => fetchFrom('who-2', whoOne[0]).startsWith('(no answer'), 30_000, () => 'who-2 → who-one still answers under internalTrafficPolicy Local');
  const local = knictlTrace('w2', 'who-2', whoOne[0]);
  assert.deepEqual([local.kind, local.ok, local.hops.length], ['service', false, 2], JSON.stringify(local));
  assert.equal(local.hops[1].problem, 'Service default/who-one has internalTrafficPolicy Local and no ready endpoint on this node (kc-w2), 1 on others: kube-proxy drops what is sent to it from this node');
  const here = knictlTrace('w1', 'who-1', whoOne[0]);
  assert.equal(here.ok, true, JSON.stringify(here));
  assert.match(here.hops[1].what, /rewrites it to its only ready endpoint on this node \(internalTrafficPolicy Local\); /);
  kubectl('delete', 'service', 'who-one');
  // A Service no ready pod backs, and an address of the range no Service has: what stops the packet.
  apply(`apiVersion: v1
kind: Service
metadata: {name: nobody}
spec: {selector: {app: nobody}, ports: [{name: web, port: 8080, targetPort: 80}]}
`);
  const nobody = kubectlJson('get', 'service', 'nobody').spec.clusterIP;
  const none = knictlTrace('w1', 'who-1', nobody);
  assert.deepEqual([none.kind, none.ok, none.hops.length], ['service', false, 2], JSON.stringify(none));
  assert.equal(none.hops[1].problem, 'Service default/nobody has no endpoint to send it to: no ready pod matches its selector app=nobody (kubectl get pods -n default -l app=nobody)');
  assert.match(none.hops[1].what, /^\S+ is Service default\/nobody's ClusterIP \(ServiceCIDR kubernetes \S+; web 8080\/TCP\)$/);
  kubectl('delete', 'service', 'nobody');
  const taken = new Set(kubectlJson('get', 'ipaddresses').items.map((a: any) => a.metadata.name));
  const free = ['10.96.254.254', '10.96.254.253', '10.96.254.252'].find((ip) => !taken.has(ip))!;
  const nothing = knictlTrace('w1', 'who-1', free);
  assert.deepEqual([nothing.kind, nothing.ok], ['service', false], JSON.stringify(nothing));
  assert.equal(nothing.hops[1].problem, `no Service has ClusterIP ${free}: nothing rewrites it, nothing answers (kubectl get services -A lists the ClusterIPs)`);
}
