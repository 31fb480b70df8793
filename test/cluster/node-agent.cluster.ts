// kni as a Kubernetes node agent in the test cluster (hack/cluster/cluster.sh, kni run as the
// DaemonSet runs it: its ConfigMap, its service account's rights, KNI_NODE_NAME). The cluster is
// routed here: kc-w2 is on another subnet than kc-w1, behind a router netns, so backend auto
// reaches it through vxlan, and a Node added on kc-w1's subnet through host-gw from kc-w1. Pod
// ranges from the Node, a Node added and deleted, an API server outage with kni restarted in
// it, a pod range run out (the IPv4 node mask is /28 here), live and refused ConfigMap edits.
// (host-gw between the two workers: workloads.cluster.ts, on a one-subnet cluster.)
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';
import { criClient } from '../helpers/containerd-env';
import { waitFor } from '../helpers/wait';
import { apply, CL, cluster, knictl, knictlTrace, kubectl, kubectlJson, WORKERS } from './cluster-helpers';

const condition = (node: any, type: string) => node.status.conditions?.find((c: any) => c.type === type);
const node = (name: string) => kubectlJson('get', 'node', name);
const peerRoutes = (w: string) => knictl(w, 'node').cluster.peers.flatMap((p: any) => p.routes.map((r: any) => ({ node: p.name, ...r })));
const kernelRoutes = (w: string) => execFileSync('ip', ['-n', `kc-${w}`, 'route', 'show', 'proto', '107'], { encoding: 'utf8' }) + execFileSync('ip', ['-n', `kc-${w}`, '-6', 'route', 'show', 'proto', '107'], { encoding: 'utf8' });

// A pod pinned to a node that answers HTTP with the address it was reached from (busybox httpd
// CGI: REMOTE_ADDR), so a test sees whether the source address survived the trip.
const WHOAMI = (name: string, nodeName: string, labels = 'app: whoami') => `apiVersion: v1
kind: Pod
metadata: {name: ${name}, labels: {${labels}}}
spec:
  nodeName: ${nodeName}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: kni.local/e2e:1
    imagePullPolicy: Never
    command: ["/bin/busybox", "sh", "-c", "mkdir -p /www/cgi-bin && printf '#!/bin/sh\\\\necho Content-Type: text/plain\\\\necho\\\\necho from=$REMOTE_ADDR\\\\n' > /www/cgi-bin/ip && chmod +x /www/cgi-bin/ip && exec /bin/busybox httpd -f -p 80 -h /www"]
`;

const podIps = (name: string): string[] => kubectlJson('get', 'pod', name).status.podIPs.map((x: any) => x.ip);
const running = (name: string) => {
  try {
    return kubectlJson('get', 'pod', name).status.phase === 'Running';
  } catch {
    return false;
  }
};
/** GET /cgi-bin/ip from inside pod `from` to address `to`: the address the server saw. */
function fetchFrom(from: string, to: string): string {
  const host = to.includes(':') ? `[${to}]` : to;
  let out: string;
  try {
    out = kubectl('exec', from, '--', '/bin/busybox', 'sh', '-c', `printf 'GET /cgi-bin/ip HTTP/1.0\\r\\nHost: ${host}\\r\\n\\r\\n' | /bin/busybox nc -w 5 ${to} 80`);
  } catch (e) {
    out = String((e as { stderr?: string }).stderr ?? e);
  }
  const seen = /from=(\S+)/.exec(out)?.[1];
  // busybox httpd listens on one dual-stack socket: IPv4 peers show as [::ffff:a.b.c.d].
  return seen ? seen.replace(/^\[|\]$/g, '').replace(/^::ffff:(?=\d+\.)/, '') : `(no answer: ${out.slice(0, 200)})`;
}

describe('cluster: kni as the node agent', function () {
  this.timeout(300_000);
  const saved = { mask: process.env.KNI_CLUSTER_NODE_MASK4, routed: process.env.KNI_CLUSTER_ROUTED };

  before(() => {
    cluster('down');
    process.env.KNI_CLUSTER_NODE_MASK4 = '28';
    process.env.KNI_CLUSTER_ROUTED = '1';
    cluster('up');
    cluster('kni');
  });
  after(() => {
    cluster('down');
    for (const [k, v] of [['KNI_CLUSTER_NODE_MASK4', saved.mask], ['KNI_CLUSTER_ROUTED', saved.routed]] as const) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  });

  it('each kni takes its pod ranges from its Node, reaches the other (on another subnet) through vxlan, sets NetworkUnavailable False; knictl node and the metrics show it', async () => {
    for (const w of WORKERS) {
      const n = node(`kc-${w}`);
      await waitFor(() => condition(node(`kc-${w}`), 'NetworkUnavailable')?.status === 'False', 30_000, () => JSON.stringify(node(`kc-${w}`).status.conditions));
      const s = knictl(w, 'node');
      assert.deepEqual(s.networks[0].ranges, n.spec.podCIDRs);
      assert.deepEqual(s.cluster.ranges, n.spec.podCIDRs);
      assert.equal(s.cluster.pod_cidrs_source, 'node IPAM');
      assert.equal(s.cluster.api.connected, true);
      const other = WORKERS.find((x) => x !== w)!;
      const routes = peerRoutes(w);
      assert.deepEqual(routes.map((r: any) => [r.node, r.destination, r.backend, r.state]), node(`kc-${other}`).spec.podCIDRs.map((c: string) => [`kc-${other}`, c, 'vxlan', 'installed']));
      assert.match(execFileSync('ip', ['-n', `kc-${w}`, '-d', 'link', 'show', 'kni.vxlan'], { encoding: 'utf8' }), /vxlan id 4096 local 10\.240\.[01]\.1[12] .*dstport 8472 nolearning/);
      assert.equal(condition(node(`kc-${w}`), 'kni.dev/IPAMExhausted').status, 'False');
      const metrics = execFileSync('ip', ['netns', 'exec', `kc-${w}`, 'curl', '-s', '-m', '5', 'http://127.0.0.1:9273/metrics'], { encoding: 'utf8' });
      assert.match(metrics, /^kni_peer_nodes 1$/m);
      assert.match(metrics, /^kni_peer_routes\{backend="vxlan",state="installed"\} 2$/m);
      assert.match(metrics, /^kni_kubernetes_api_connected 1$/m);
      assert.match(metrics, /^kni_step_duration_seconds_count\{step="peers\.sync"\} [1-9]/m);
    }
  });

  it('pods on different nodes reach each other over IPv4 and IPv6 and see each other\'s pod IP as source; a ClusterIP Service answers from every node, hairpin included', async () => {
    apply(WHOAMI('who-1', 'kc-w1', 'app: whoami, who: one'));
    apply(WHOAMI('who-2', 'kc-w2'));
    apply(`apiVersion: v1
kind: Service
metadata: {name: whoami}
spec: {selector: {app: whoami}, ipFamilyPolicy: PreferDualStack, ports: [{port: 80}]}
`);
    await waitFor(() => running('who-1') && running('who-2'), 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    const [a4, a6] = podIps('who-1');
    const [b4, b6] = podIps('who-2');
    assert.equal(fetchFrom('who-1', b4), a4);
    assert.equal(fetchFrom('who-1', b6), a6);
    assert.equal(fetchFrom('who-2', a4), b4);
    assert.equal(fetchFrom('who-2', a6), b6);
    // knictl trace names the same path: who-1's route, then kni's vxlan route to kc-w2's pods.
    for (const ip of [b4, b6]) {
      const t = knictl('w1', 'trace', 'who-1', ip);
      assert.deepEqual([t.kind, t.ok, t.hops.map((h: any) => h.at)], ['peer-pod', true, ['pod', 'node', 'kc-w2']], JSON.stringify(t));
      // The pod holding that address, looked up by it (status.podIP).
      assert.equal(t.hops[2].what, 'delivered by node kc-w2 to pod default/who-2 (trace there with knictl on kc-w2)');
      assert.match(t.hops[1].what, new RegExp(`^${ip} is in node kc-w2's podCIDR \\S+: kni's vxlan route \\S+ dev \\S+$`));
    }
    const w2 = knictl('w1', 'node').cluster.peers.find((p: any) => p.name === 'kc-w2').internal_ips[0];
    const toNode = knictl('w1', 'trace', 'who-1', w2);
    assert.deepEqual([toNode.kind, toNode.ok], ['peer-node', true], JSON.stringify(toNode));
    assert.match(toNode.hops[1].what, new RegExp(`^${w2.replace(/\\./g, '\\\\.')} is node kc-w2's InternalIP: the node routes it .*; masqueraded to the node's address \\(KNI-MASQ\\)$`));
    // The router between the subnets knows no pod range: only the overlay crossed it.
    assert.doesNotMatch(execFileSync('ip', ['-n', 'kc-wire', 'route'], { encoding: 'utf8' }) + execFileSync('ip', ['-n', 'kc-wire', '-6', 'route'], { encoding: 'utf8' }), /10\.244\.|fd00:10:244/);
    // Traffic leaving the cluster's pod CIDRs (here to the host's address) is still masqueraded.
    const masqueraded = () => Number(/^\s*(\d+)\s+\d+\s+MASQUERADE/m.exec(execFileSync('ip', ['netns', 'exec', 'kc-w1', 'iptables', '-t', 'nat', '-L', 'KNI-MASQ', '-v', '-x', '-n'], { encoding: 'utf8' }))?.[1] ?? -1);
    const before = masqueraded();
    kubectl('exec', 'who-1', '--', '/bin/busybox', 'ping', '-c', '1', '-W', '2', '10.240.0.1');
    assert.ok(masqueraded() > before, 'pod → outside the cluster was not masqueraded');
    // The Service: from each pod, many times (kube-proxy picks either endpoint, one of them the
    // asking pod itself: hairpin through the bridge).
    const svc = kubectlJson('get', 'service', 'whoami').spec.clusterIPs as string[];
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
      assert.match(endpoints[0], /^kc-w2 delivered by node kc-w2 to its pod/);
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
    // The NetworkPolicies on the path, judged (kni enforces none, and no policy agent runs here:
    // the path stays open; the trace says what an agent would drop). who-1 may send to pods of
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
      `node NetworkPolicy default/web-in selects pod default/who-1 for ingress; default/web-in allows it from pod default/who-1${only}`,
      `pod NetworkPolicy default/one-out selects pod default/who-1 for egress; default/one-out allows it to pod default/who-1${only}`,
      `pod NetworkPolicy default/one-out selects pod default/who-1 for egress; default/one-out allows it to pod default/who-2${only}`,
    ], JSON.stringify(policed));
    // Each endpoint's egress hop comes before it, its ingress hop after it.
    const i = policed.hops.findIndex((h: any) => /^endpoint default\/who-2:/.test(h.what));
    const around = policed.hops.slice(i - 1, i + 3).map((h: any) => `${h.at} ${h.what}`);
    [/^pod NetworkPolicy default\/one-out .* to pod default\/who-2 /, /^node endpoint default\/who-2: /, /^kc-w2 delivered by node kc-w2/, /^kc-w2 NetworkPolicy default\/web-in selects pod default\/who-2 for ingress/].forEach((re, k) => assert.match(around[k] ?? '', re, JSON.stringify(policed)));
    // To the Service's port: each endpoint's port named; to one it lacks: nothing answers.
    const on80 = knictlTrace('w1', 'who-1', svc[0], '--port', '80');
    assert.equal(on80.ok, true, JSON.stringify(on80));
    assert.deepEqual(on80.hops.filter((h: any) => /^endpoint /.test(h.what)).map((h: any) => h.what.split(':')[0]).sort(), ['endpoint default/who-1 (port 80/TCP)', 'endpoint default/who-2 (port 80/TCP)']);
    assert.ok(policyHops(on80).every((h: string) => h.endsWith(' on 80/TCP')), JSON.stringify(policyHops(on80)));
    const on81 = knictlTrace('w1', 'who-1', svc[0], '--port', '81');
    assert.deepEqual([on81.ok, on81.hops.length, on81.hops[1].problem], [false, 2, 'Service default/whoami has no port 81/TCP (it has 80/TCP): kube-proxy rewrites none of it, nothing answers'], JSON.stringify(on81));
    // who-2 is no who-1: what it sends who-1 is dropped where an agent enforces web-in.
    const toPod = knictlTrace('w2', 'who-2', 'pod/default/who-1', '--port', '80');
    assert.equal(toPod.ok, false, JSON.stringify(toPod));
    assert.deepEqual(toPod.hops[toPod.hops.length - 1], { at: 'kc-w1', what: 'NetworkPolicy default/web-in selects pod default/who-1 for ingress', problem: 'it allows nothing sent from pod default/who-2 on 80/TCP: a policy agent enforcing it drops it (kni enforces none)' });
    // By address (the pod looked up by it): the same verdicts.
    const byIp = knictlTrace('w1', 'who-1', b6);
    assert.deepEqual(policyHops(byIp), [
      `kc-w2 NetworkPolicy default/web-in selects pod default/who-2 for ingress; default/web-in allows it from pod default/who-1${only}`,
      `pod NetworkPolicy default/one-out selects pod default/who-1 for egress; default/one-out allows it to pod default/who-2${only}`,
    ], JSON.stringify(byIp));
    // Outside the cluster: no pod, so no namespace of its; one-out lets nothing out there.
    const out = knictlTrace('w1', 'who-1', '10.240.0.1');
    assert.deepEqual(out.hops[1], { at: 'pod', what: 'NetworkPolicy default/one-out selects pod default/who-1 for egress', problem: 'it allows nothing sent to 10.240.0.1: a policy agent enforcing it drops it (kni enforces none)' }, JSON.stringify(out));
    // From the nodes: its own node always reaches a pod (the kubelet's probes); another node is
    // only an address, which web-in does not allow.
    const ownNode = knictlTrace('w1', '--from-node', 'pod/default/who-1');
    assert.equal(ownNode.ok, true, JSON.stringify(ownNode));
    assert.equal(ownNode.hops[ownNode.hops.length - 1].what, "NetworkPolicy default/web-in selects pod default/who-1 for ingress; what passes between a pod and its own node is never a policy's to stop");
    const otherNode = knictlTrace('w2', '--from-node', 'pod/default/who-1');
    assert.equal(otherNode.ok, false, JSON.stringify(otherNode));
    assert.match(otherNode.hops[otherNode.hops.length - 1].problem, /^it allows nothing sent from node \S+: a policy agent enforcing it drops it \(kni enforces none\)$/);
    kubectl('delete', 'networkpolicy', 'web-in', 'one-out');
    // From kc-w2 itself (as its kubelet or a host-network pod sends): the same Service, who-2 here.
    const fromNode = knictlTrace('w2', '--from-node', svc[0]);
    assert.deepEqual([fromNode.kind, fromNode.ok, fromNode.hops.length], ['service', true, 4], JSON.stringify(fromNode));
    assert.match(fromNode.hops[0].what, /^\S+ is Service default\/whoami's ClusterIP /);
    assert.ok(fromNode.hops.some((h: any) => /^endpoint default\/who-2: pod default\/who-2 on this node/.test(h.what)), JSON.stringify(fromNode));
    const host = knictl('w1', 'trace', 'who-1', '10.240.0.1');
    assert.equal(host.kind, 'outside', JSON.stringify(host));
    assert.doesNotMatch(host.hops[1].what, /Service/);
    for (const from of ['who-1', 'who-2']) {
      for (const ip of svc) {
        const seen = new Set<string>();
        for (let i = 0; i < 12; i++) seen.add(fetchFrom(from, ip));
        assert.ok([...seen].every((x) => !x.startsWith('(no answer')), `${from} → Service ${ip}: ${[...seen].join(' ')}`);
      }
    }
    // Hairpin for sure: a Service whose only endpoint is the asking pod.
    apply(`apiVersion: v1
kind: Service
metadata: {name: who-one}
spec: {selector: {who: one}, ipFamilyPolicy: PreferDualStack, ports: [{port: 80}]}
`);
    const whoOne = kubectlJson('get', 'service', 'who-one').spec.clusterIPs as string[];
    for (const ip of whoOne) {
      await waitFor(() => !fetchFrom('who-1', ip).startsWith('(no answer'), 30_000, () => `who-1 → its own Service ${ip}: ${fetchFrom('who-1', ip)}`);
    }
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
    // From every node's own network namespace (kube-proxy's rules on the node, pods elsewhere).
    for (const w of WORKERS) {
      const out = execFileSync('ip', ['netns', 'exec', `kc-${w}`, 'curl', '-s', '-m', '5', `http://${svc[0]}/cgi-bin/ip`], { encoding: 'utf8' });
      assert.match(out, /from=/, `node kc-${w} → Service ${svc[0]}`);
    }
  });

  it('a Node added gets routes on every node (host-gw where it shares the subnet, vxlan where not); a route deleted behind kni\'s back comes back, as does forwarding turned off, each with an Event on the Node; the Node deleted, they go', async () => {
    apply(`apiVersion: v1
kind: Node
metadata: {name: kc-extra}
spec: {podCIDRs: ["10.244.200.0/28", "fd00:10:244:c8::/64"], podCIDR: "10.244.200.0/28", taints: [{key: example.com/not-real, effect: NoSchedule}]}
status: {addresses: [{type: InternalIP, address: 10.240.0.50}, {type: InternalIP, address: "fd00:240::50"}]}
`);
    await waitFor(() => /10\.244\.200\.0\/28 via 10\.240\.0\.50 dev eth0/.test(kernelRoutes('w1')) && /fd00:10:244:c8::\/64 via fd00:240::50 dev eth0/.test(kernelRoutes('w1')), 30_000, () => kernelRoutes('w1'));
    await waitFor(() => /10\.244\.200\.0\/28 via 10\.244\.200\.1 dev kni\.vxlan onlink/.test(kernelRoutes('w2')) && /fd00:10:244:c8::\/64 via fd00:10:244:c8::1 dev kni\.vxlan/.test(kernelRoutes('w2')), 30_000, () => kernelRoutes('w2'));
    const fdb = () => execFileSync('bridge', ['-n', 'kc-w2', 'fdb', 'show', 'dev', 'kni.vxlan'], { encoding: 'utf8' });
    assert.match(fdb(), /dst 10\.240\.0\.50 self permanent/);
    // Deleted behind kni's back, with no Node event to follow: the periodic check puts it back.
    execFileSync('ip', ['-n', 'kc-w1', 'route', 'del', '10.244.200.0/28']);
    await waitFor(() => /10\.244\.200\.0\/28 via 10\.240\.0\.50 dev eth0/.test(kernelRoutes('w1')), 30_000, () => kernelRoutes('w1'));
    assert.match(execFileSync('cat', [`${CL}/run/kni-w1.log`], { encoding: 'utf8' }), /the route to node kc-extra's pods 10\.244\.200\.0\/28 was gone from the kernel; installed again/);
    const nodeEvents = (reason: string) => kubectlJson('get', 'events', '--field-selector', `involvedObject.name=kc-w1,reason=${reason}`).items.map((e: any) => e.message).join('\n');
    await waitFor(() => /installed them again: 10\.244\.200\.0\/28 \(node kc-extra\)/.test(nodeEvents('PeerRoutesRestored')), 30_000, () => nodeEvents('PeerRoutesRestored'));
    // The node network undone (forwarding off): reconcile puts it back and says so on the Node.
    execFileSync('ip', ['netns', 'exec', 'kc-w1', 'sysctl', '-qw', 'net.ipv4.ip_forward=0']);
    assert.match(knictl('w1', 'reconcile').findings.join('\n'), /net\.ipv4\.ip_forward is off/);
    assert.equal(execFileSync('ip', ['netns', 'exec', 'kc-w1', 'sysctl', '-n', 'net.ipv4.ip_forward'], { encoding: 'utf8' }).trim(), '1');
    await waitFor(() => /the node network was changed behind kni's back \(net\.ipv4\.ip_forward is off\); kni set it up again/.test(nodeEvents('NodeNetworkRepaired')), 30_000, () => nodeEvents('NodeNetworkRepaired'));
    kubectl('delete', 'node', 'kc-extra');
    for (const w of WORKERS) await waitFor(() => !/10\.244\.200\./.test(kernelRoutes(w)), 30_000, () => kernelRoutes(w));
    assert.doesNotMatch(fdb(), /10\.240\.0\.50/);
  });

  it('a bogus Node (a default route for a podCIDR, an InternalIP that is no address) gets no route and is reported with its reason; masquerading and the other peer\'s routes stay as they were', async () => {
    const masq = () => execFileSync('ip', ['netns', 'exec', 'kc-w1', 'iptables', '-t', 'nat', '-S', 'KNI-MASQ'], { encoding: 'utf8' });
    const before = masq();
    const unavailable = () => condition(node('kc-w1'), 'NetworkUnavailable');
    apply(`apiVersion: v1
kind: Node
metadata: {name: kc-bogus}
spec: {podCIDRs: ["0.0.0.0/0", "fd00:99::/64"], podCIDR: "0.0.0.0/0", taints: [{key: example.com/not-real, effect: NoSchedule}]}
status: {addresses: [{type: InternalIP, address: not-an-ip}]}
`);
    try {
      await waitFor(() => /kc-bogus/.test(unavailable()?.message ?? ''), 30_000, () => JSON.stringify(unavailable()));
      const bogus = peerRoutes('w1').filter((r: any) => r.node === 'kc-bogus');
      assert.deepEqual(bogus.map((r: any) => [r.destination, r.state]), [['0.0.0.0/0', 'failed'], ['fd00:99::/64', 'unreachable']]);
      assert.match(bogus[0].error, /^podCIDR 0\.0\.0\.0\/0 is a default route, never a pod range$/);
      assert.match(bogus[1].error, /\("not-an-ip" is not an IP address\)$/);
      assert.match(unavailable().message, /kc-bogus 0\.0\.0\.0\/0 \(podCIDR 0\.0\.0\.0\/0 is a default route/);
      assert.equal(masq(), before, 'a refused podCIDR changed what is masqueraded');
      assert.ok(peerRoutes('w1').filter((r: any) => r.node === 'kc-w2').every((r: any) => r.state === 'installed'));
    } finally {
      kubectl('delete', 'node', 'kc-bogus');
    }
    await waitFor(() => unavailable()?.status === 'False', 30_000, () => JSON.stringify(unavailable()));
  });

  it('many peers: knictl node sums up the routes and lists only the peers with a problem (--all-peers: every one)', async () => {
    const many = Array.from({ length: 45 }, (_, i) => `apiVersion: v1
kind: Node
metadata: {name: kc-many-${i}, labels: {kni.test/many: "1"}}
spec: {podCIDRs: ["10.244.${100 + i}.0/24"], podCIDR: "10.244.${100 + i}.0/24", taints: [{key: example.com/not-real, effect: NoSchedule}]}
status: {addresses: [{type: InternalIP, address: ${i ? `10.240.0.${100 + i}` : 'not-an-ip'}}]}
`).join('---\n');
    const text = (...args: string[]) => execFileSync(process.execPath, ['dist/plugin/knictl.js', '--socket', `${CL}/w1/root/run/kni/kni.sock`, 'node', ...args], { encoding: 'utf8' });
    apply(many);
    try {
      await waitFor(() => knictl('w1', 'node').cluster.peers.length === 46 && /^peers: 46 node\(s\); routes: 46 installed, 1 unreachable$/m.test(text()), 30_000, () => text());
      const shown = text();
      const listed = shown.split('\n').filter((l) => /^kc-(many|w2)/.test(l));
      assert.deepEqual(listed.map((l) => l.split(/\s+/)[0]), ['kc-many-0'], shown);
      assert.match(shown, /^\(45 peer\(s\) with every route installed not listed: --all-peers lists them\)$/m);
      const all = text('--all-peers').split('\n').filter((l) => /^kc-(many|w2)/.test(l));
      assert.equal(all.length, 47, all.join('\n'));
    } finally {
      kubectl('delete', 'node', '-l', 'kni.test/many=1');
    }
    await waitFor(() => knictl('w1', 'node').cluster.peers.length === 1, 30_000, () => text());
    assert.doesNotMatch(kernelRoutes('w1'), /10\.244\.1[0-4][0-9]\./);
  });

  it('API server away: pods keep talking across nodes; kni restarted meanwhile comes back from its state and wires a sandbox made through CRI; when the API returns it catches up', async () => {
    const podsBefore = knictl('w1', 'pods').length;
    cluster('apiserver-stop');
    try {
      cluster('kni-stop w1');
      cluster('kni-restart w1');
      await waitFor(() => knictl('w1', 'node').ready === true, 30_000, () => execFileSync('tail', ['-5', `${CL}/run/kni-w1.log`], { encoding: 'utf8' }));
      const s = knictl('w1', 'node');
      assert.equal(s.cluster.api.connected, false, 'the API server is down, yet kni says it is connected');
      assert.equal(knictl('w1', 'pods').length, podsBefore, 'pods lost across the restart');
      assert.match(kernelRoutes('w1'), /dev kni\.vxlan/, 'routes to the other node went with the restart');
      // Pod to pod across nodes still works (kubectl exec needs the API: from the pod netns directly).
      const w1pod = knictl('w1', 'pods').find((p: any) => p.pod?.name === 'who-1');
      const target = knictl('w2', 'pods').find((p: any) => p.pod?.name === 'who-2').interfaces[0].addresses[0].address;
      // The pod's netns pin lives in the node's mount namespace: enter that first.
      const ok = execFileSync('nsenter', [`--mount=${CL}/mnt/w1`, 'nsenter', `--net=${w1pod.netns_path}`, 'ping', '-c', '1', '-W', '2', target], { encoding: 'utf8' });
      assert.match(ok, /1 received/);
      // A sandbox made through CRI while the API server is away (as crictl runp would).
      const cri = criClient(`${CL}/w1/root/run/containerd/containerd.sock`);
      try {
        const { pod_sandbox_id: id } = await cri.RunPodSandbox({ config: { metadata: { name: 'offline', namespace: 'default', uid: 'uid-offline', attempt: 0 }, linux: {} } });
        const st = await cri.PodSandboxStatus({ pod_sandbox_id: id });
        assert.match(st.status.network.ip, /^10\.244\./);
        await cri.StopPodSandbox({ pod_sandbox_id: id });
        await cri.RemovePodSandbox({ pod_sandbox_id: id });
      } finally {
        cri.close();
      }
    } finally {
      cluster('apiserver-start');
    }
    await waitFor(() => knictl('w1', 'node').cluster.api.connected === true, 60_000, () => JSON.stringify(knictl('w1', 'node').cluster.api));
    apply(`apiVersion: v1
kind: Node
metadata: {name: kc-late}
spec: {podCIDRs: ["10.244.201.0/28"], podCIDR: "10.244.201.0/28", taints: [{key: example.com/not-real, effect: NoSchedule}]}
status: {addresses: [{type: InternalIP, address: 10.240.0.51}]}
`);
    try {
      // w1 was restarted in the outage; w2's watch broke and resumed: both catch up.
      for (const w of WORKERS) await waitFor(() => /10\.244\.201\.0\/28 via /.test(kernelRoutes(w)), 30_000, () => kernelRoutes(w));
      assert.ok(knictl('w2', 'node').cluster.api.watch_restarts >= 1, 'w2 never saw its watch break: the outage proves nothing');
      // Every watch of each kni (w2's broke while it ran, w1's failed from its start) came back
      // and said so; a failure was logged once, not at each retry.
      const watches = ['Node', 'ConfigMap', 'Pod', 'NetworkAttachmentDefinition'];
      for (const w of WORKERS) {
        const lines = () => execFileSync('cat', [`${CL}/run/kni-${w}.log`], { encoding: 'utf8' }).split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
        await waitFor(() => watches.every((what) => lines().some((l) => l.msg === `${what} watch is back`)), 60_000, () => `${w}: ${lines().filter((l) => / watch /.test(l.msg)).map((l) => `${l.msg} ${l.error ?? ''}`).join('; ')}`);
        for (const what of watches) {
          let last = '';
          for (const l of lines()) {
            if (l.msg === `${what} watch is back`) last = '';
            if (!String(l.msg).startsWith(`${what} watch broke`)) continue;
            assert.notEqual(l.error, last, `${w}: the ${what} watch logged the same failure twice in a row: ${l.error}`);
            last = l.error;
          }
        }
      }
    } finally {
      kubectl('delete', 'node', 'kc-late');
    }
  });

  it('a /28 pod range runs out: IPAMExhausted and the NoSchedule taint are set, new pods go to the other node, none is evicted; the taint goes after a deletion', async () => {
    const free = Number(knictl('w1', 'ipam').ranges.find((r: any) => r.family === 'IPV4' || r.family === 4 || /\./.test(r.cidr)).free);
    assert.ok(free > 0 && free < 16, `free IPv4 addresses on kc-w1: ${free}`);
    const names = Array.from({ length: free }, (_, i) => `fill-${i}`);
    for (const n of names) apply(WHOAMI(n, 'kc-w1', 'app: fill'));
    await waitFor(() => names.every(running), 180_000, () => kubectl('get', 'pods', '-o', 'wide'));
    await waitFor(() => condition(node('kc-w1'), 'kni.dev/IPAMExhausted')?.status === 'True', 30_000, () => JSON.stringify(node('kc-w1').status.conditions));
    assert.match(condition(node('kc-w1'), 'kni.dev/IPAMExhausted').message, /10\.244\.\d+\.\d+\/28/);
    assert.ok(node('kc-w1').spec.taints?.some((t: any) => t.key === 'kni.dev/ipam-exhausted' && t.effect === 'NoSchedule'));
    // The runtime still reports its network ready (kni's CNI STATUS does not fail for a full range
    // in Kubernetes): else the kubelet would set the node NotReady, and the node lifecycle
    // controller taint it NoExecute and evict its pods.
    const cri = criClient(`${CL}/w1/root/run/containerd/containerd.sock`);
    try {
      const conditions = (await cri.Status({})).status.conditions;
      assert.deepEqual(conditions.find((c: any) => c.type === 'NetworkReady'), { type: 'NetworkReady', status: true, reason: '', message: '' }, JSON.stringify(conditions));
    } finally {
      cri.close();
    }
    // A pod that may only run on kc-w1 stays Pending on a taint (kni's: the node's only one). This also
    // waits out the scheduler's own view of the Node, which may trail the API by a moment (a
    // Deployment made at once had a pod bound to kc-w1 before its cache had the taint).
    apply(`apiVersion: v1
kind: Pod
metadata: {name: pinned, labels: {app: fill}}
spec:
  nodeSelector: {kubernetes.io/hostname: kc-w1}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers: [{name: c, image: kni.local/e2e:1, imagePullPolicy: Never, command: ["/pause"]}]
`);
    const unschedulable = () => kubectlJson('get', 'pod', 'pinned').status.conditions?.find((c: any) => c.type === 'PodScheduled' && c.status === 'False');
    await waitFor(() => /1 node\(s\) had untolerated taint/.test(unschedulable()?.message ?? ''), 60_000, () => JSON.stringify(kubectlJson('get', 'pod', 'pinned').status));
    assert.deepEqual(node('kc-w1').spec.taints.map((t: any) => `${t.key}:${t.effect}`), ['kni.dev/ipam-exhausted:NoSchedule']);
    kubectl('delete', 'pod', 'pinned', '--wait=false');
    // The scheduler now places new pods on the other node.
    apply(`apiVersion: apps/v1
kind: Deployment
metadata: {name: spill}
spec:
  replicas: 3
  selector: {matchLabels: {app: spill}}
  template:
    metadata: {labels: {app: spill}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      containers: [{name: c, image: kni.local/e2e:1, imagePullPolicy: Never, command: ["/pause"]}]
`);
    await waitFor(() => kubectlJson('get', 'pods', '-l', 'app=spill').items.filter((p: any) => p.status.phase === 'Running').length === 3, 120_000, () => kubectl('get', 'pods', '-l', 'app=spill', '-o', 'wide') + kubectl('describe', 'pods', '-l', 'app=spill').split('\n').filter((l) => /^Name:|^Node:|^Status:|^\s+(Warning|Normal)\s/.test(l)).join('\n'));
    assert.deepEqual([...new Set(kubectlJson('get', 'pods', '-l', 'app=spill').items.map((p: any) => p.spec.nodeName))], ['kc-w2']);
    assert.ok(names.every(running), 'a running pod was evicted');
    assert.equal(condition(node('kc-w1'), 'Ready').status, 'True', JSON.stringify(condition(node('kc-w1'), 'Ready')));
    assert.ok(!node('kc-w1').spec.taints?.some((t: any) => t.key.startsWith('node.kubernetes.io/')), JSON.stringify(node('kc-w1').spec.taints));
    kubectl('delete', 'pod', names[0], '--wait=true');
    await waitFor(() => !node('kc-w1').spec.taints?.some((t: any) => t.key === 'kni.dev/ipam-exhausted'), 60_000, () => JSON.stringify(node('kc-w1').spec.taints));
    assert.equal(condition(node('kc-w1'), 'kni.dev/IPAMExhausted').status, 'False');
    kubectl('delete', 'pod', '-l', 'app=fill', '--wait=false');
    kubectl('delete', 'deployment', 'spill', '--wait=false');
  });

  it('ConfigMap edits: an invalid one and one needing a restart are refused with an Event and kni keeps serving; log level, backend and nonMasqueradeCIDRs change live (host-gw cannot reach the other subnet: reported, NetworkUnavailable True; back to auto: vxlan again); deleted, kni keeps its config and says so', async () => {
    const cm = kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-config');
    const original: string = cm.data['config.yaml'];
    const edit = (text: string) => kubectl('-n', 'kube-system', 'patch', 'configmap', 'kni-config', '--type', 'merge', '-p', JSON.stringify({ data: { 'config.yaml': text } }));
    const events = () => kubectlJson('-n', 'kube-system', 'get', 'events', '--field-selector', 'involvedObject.name=kni-config').items;
    try {
      edit(`${original}\nmtu: 12\n`);
      await waitFor(() => events().some((e: any) => e.reason === 'ConfigRefused' && /mtu 12 is not "auto" or an integer from 576/.test(e.message)), 30_000, () => JSON.stringify(events()));
      edit(`${original}\nbridge: other0\n`);
      await waitFor(() => events().some((e: any) => e.reason === 'ConfigRefused' && /bridge cannot change while kni runs/.test(e.message)), 30_000, () => JSON.stringify(events()));
      assert.equal(knictl('w1', 'node').networks[0].bridge, 'kni0');
      assert.equal(knictl('w1', 'node').ready, true);

      const logLines = () => execFileSync('cat', [`${CL}/run/kni-w1.log`], { encoding: 'utf8' }).split('\n').filter((l) => l.includes('"level":"debug"')).length;
      const before = logLines();
      // host-gw cannot reach a node on another subnet: reported, and NetworkUnavailable says so.
      assert.match(original, /^backend: auto$/m);
      edit(`${original.replace(/^backend: auto$/m, 'backend: host-gw')}\nlogLevel: debug\nnonMasqueradeCIDRs: [10.240.0.1/32]\n`);
      // A network the pods reach with their own address: in the masquerade chain at once.
      const masqChain = () => execFileSync('ip', ['netns', 'exec', 'kc-w1', 'iptables', '-t', 'nat', '-S', 'KNI-MASQ'], { encoding: 'utf8' });
      await waitFor(() => /-A KNI-MASQ -d 10\.240\.0\.1\/32 -j RETURN\n-A KNI-MASQ -j MASQUERADE/.test(masqChain()), 30_000, masqChain);
      await waitFor(() => peerRoutes('w1').every((r: any) => r.state === 'unreachable'), 30_000, () => JSON.stringify(peerRoutes('w1')));
      assert.match(peerRoutes('w1')[0].error, /InternalIP 10\.240\.1\.12 is not on a subnet this node is connected to/);
      await waitFor(() => condition(node('kc-w1'), 'NetworkUnavailable')?.status === 'True', 30_000, () => JSON.stringify(node('kc-w1').status.conditions));
      assert.equal(condition(node('kc-w1'), 'NetworkUnavailable').reason, 'KniRoutesMissing');
      assert.doesNotMatch(kernelRoutes('w1'), /kni\.vxlan/);
      // Something logged at debug level: the new level took effect without a restart.
      await waitFor(() => logLines() > before, 30_000, () => 'no debug line after logLevel: debug');
    } finally {
      edit(original);
    }
    await waitFor(() => peerRoutes('w1').every((r: any) => r.backend === 'vxlan' && r.state === 'installed'), 30_000, () => JSON.stringify(peerRoutes('w1')));
    assert.doesNotMatch(execFileSync('ip', ['netns', 'exec', 'kc-w1', 'iptables', '-t', 'nat', '-S', 'KNI-MASQ'], { encoding: 'utf8' }), /10\.240\.0\.1/);
    await waitFor(() => condition(node('kc-w1'), 'NetworkUnavailable')?.status === 'False', 30_000, () => JSON.stringify(node('kc-w1').status.conditions));
    const [a4] = podIps('who-1');
    assert.equal(fetchFrom('who-2', a4), podIps('who-2')[0]);

    // Deleted: kni keeps its config and says why that matters; made again, nothing changes.
    const warned = () => execFileSync('cat', [`${CL}/run/kni-w1.log`], { encoding: 'utf8' }).includes('"msg":"ConfigMap deleted: kni keeps the config it runs with');
    kubectl('-n', 'kube-system', 'delete', 'configmap', 'kni-config');
    try {
      await waitFor(warned, 30_000, () => 'no log line for the deleted ConfigMap');
      assert.equal(knictl('w1', 'node').ready, true);
    } finally {
      apply(JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'kni-config', namespace: 'kube-system', labels: cm.metadata.labels ?? {} }, data: cm.data }));
    }
    assert.equal(kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-config').data['config.yaml'], original);
  });

  // Last: it replaces kc-w1's Node object (its podCIDRs cannot be edited in place).
  it('a podCIDR change under live pods is refused with a log line and an Event, never applied', async () => {
    const ranges = knictl('w1', 'node').cluster.ranges;
    assert.ok(knictl('w1', 'pods').length > 0, 'no live pod on kc-w1: nothing to protect');
    const n = node('kc-w1');
    kubectl('delete', 'node', 'kc-w1', '--wait=true');
    apply(`apiVersion: v1
kind: Node
metadata: {name: kc-w1}
spec: {podCIDRs: ["10.244.250.0/28", "fd00:10:244:fa::/64"], podCIDR: "10.244.250.0/28"}
status: {addresses: ${JSON.stringify(n.status.addresses)}}
`);
    const events = () => kubectlJson('get', 'events', '--field-selector', 'involvedObject.name=kc-w1,reason=PodCIDRChangeRefused').items;
    await waitFor(() => events().length > 0, 30_000, () => execFileSync('tail', ['-5', `${CL}/run/kni-w1.log`], { encoding: 'utf8' }));
    assert.match(events()[0].message, /changed to 10\.244\.250\.0\/28,fd00:10:244:fa::\/64 while \d+ pod\(s\) hold addresses/);
    const s = knictl('w1', 'node');
    assert.deepEqual(s.cluster.ranges, ranges, 'the new podCIDRs were applied under live pods');
    assert.deepEqual(s.networks[0].ranges, ranges);
    assert.match(s.cluster.ranges_problem, /not applied/);
    assert.match(execFileSync('cat', [`${CL}/run/kni-w1.log`], { encoding: 'utf8' }), /"msg":"pod range change refused"/);
    assert.equal(s.ready, true);
  });
});
