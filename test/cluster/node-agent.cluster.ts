// kni as a Kubernetes node agent in the test cluster (hack/cluster/cluster.sh, kni run as the
// DaemonSet runs it: its ConfigMap, its service account's rights, KNI_NODE_NAME). The cluster is
// routed here: kc-w2 is on another subnet than kc-w1, behind a router netns, so backend auto
// reaches it through vxlan, and a Node added on kc-w1's subnet through host-gw from kc-w1. Pod
// ranges from the Node, a Node added and deleted, an API server outage with kni restarted in
// it, a pod range run out (the IPv4 node mask is /28 here), live and refused ConfigMap edits.
// (host-gw between the two workers: workloads.cluster.ts, on a one-subnet cluster.) What knictl
// trace says here is checked by trace-checks.ts, called from the Service test; the peer probe by
// probe-checks.ts.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { criClient } from '../helpers/containerd-env';
import { longTurns, withTurnProbe } from '../helpers/turn-probe';
import { waitFor } from '../helpers/wait';
import { masqueradedPackets, masqueradeTable } from '../helpers/masquerade-table';
import { apply, CL, cluster, clusterUp, knictl, kubectl, kubectlJson, peerRoutes, WORKERS } from './cluster-helpers';
import { peerProbeChecks } from './probe-checks';
import { traceFromNode, traceNetworkPolicies, traceNodePort, traceServiceProblems, traceToPeerPod, traceToService } from './trace-checks';
import { fetchFrom, podIps, running, WHOAMI } from './whoami';

const condition = (node: any, type: string) => node.status.conditions?.find((c: any) => c.type === type);
const node = (name: string) => kubectlJson('get', 'node', name);
const kernelRoutes = (w: string) => execFileSync('ip', ['-n', `kc-${w}`, 'route', 'show', 'proto', '107'], { encoding: 'utf8' }) + execFileSync('ip', ['-n', `kc-${w}`, '-6', 'route', 'show', 'proto', '107'], { encoding: 'utf8' });

/** A made-up Node (no kubelet) with one podCIDR and one InternalIP, labelled for deletion, kept off by a taint. */
const fakeNode = (name: string, label: string, podCidr: string, ip: string): string => `apiVersion: v1
kind: Node
metadata: {name: ${name}, labels: {${label}: "1"}}
spec: {podCIDRs: ["${podCidr}"], podCIDR: "${podCidr}", taints: [{key: example.com/not-real, effect: NoSchedule}]}
status: {addresses: [{type: InternalIP, address: ${ip}}]}
`;


describe('cluster: kni as the node agent', function () {
  this.timeout(300_000);

  before(() => {
    cluster('down');
    clusterUp({ KNI_CLUSTER_NODE_MASK4: '28', KNI_CLUSTER_ROUTED: '1' });
    cluster('kni');
  });
  after(() => {
    cluster('down');
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
    await traceToPeerPod([b4, b6]);
    // The router between the subnets knows no pod range: only the overlay crossed it.
    assert.doesNotMatch(execFileSync('ip', ['-n', 'kc-wire', 'route'], { encoding: 'utf8' }) + execFileSync('ip', ['-n', 'kc-wire', '-6', 'route'], { encoding: 'utf8' }), /10\.244\.|fd00:10:244/);
    // Traffic leaving the cluster's pod CIDRs (here to the host's address) is still masqueraded.
    const masqueraded = () => masqueradedPackets('kc-w1')[0];
    const before = masqueraded();
    kubectl('exec', 'who-1', '--', '/bin/busybox', 'ping', '-c', '1', '-W', '2', '10.240.0.1');
    assert.ok(masqueraded() > before, 'pod → outside the cluster was not masqueraded');
    // The Service: from each pod, many times (kube-proxy picks either endpoint, one of them the
    // asking pod itself: hairpin through the bridge).
    const svc = kubectlJson('get', 'service', 'whoami').spec.clusterIPs as string[];
    await traceToService(svc, b4);
    traceNetworkPolicies(svc, b6);
    traceFromNode(svc);
    await traceNodePort();
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
    await traceServiceProblems(whoOne);
    // From every node's own network namespace (kube-proxy's rules on the node, pods elsewhere).
    for (const w of WORKERS) {
      const out = execFileSync('ip', ['netns', 'exec', `kc-${w}`, 'curl', '-s', '-m', '5', `http://${svc[0]}/cgi-bin/ip`], { encoding: 'utf8' });
      assert.match(out, /from=/, `node kc-${w} → Service ${svc[0]}`);
    }
  });

  it("kni's probe of each peer's pod network (every 2 s: a live ConfigMap change): answers through vxlan; vxlan's UDP port dropped by the router between the subnets: silent in knictl node, the metrics and a trace, as pods stop talking; only its large packets dropped: small-only, as pods' small exchanges still pass; let through again: answers", async () => {
    await peerProbeChecks();
  });

  it('a Node added gets routes on every node (host-gw where it shares the subnet, vxlan where not); a route deleted behind kni\'s back comes back, as do the vxlan device set down and forwarding turned off, each with an Event on the Node; the Node deleted, they go', async () => {
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
    // Deleted behind kni's back, with no Node event to follow: the kernel's notice of it has the
    // routes checked at once (the periodic check would put it back too, within 10 s).
    const noticed = () => execFileSync('cat', [`${CL}/run/kni-w1.log`], { encoding: 'utf8' }).split('\n').filter((l) => l.includes("the kernel says a route of kni's was deleted, or its vxlan device")).length;
    const noticedBefore = noticed();
    execFileSync('ip', ['-n', 'kc-w1', 'route', 'del', '10.244.200.0/28']);
    await waitFor(() => /10\.244\.200\.0\/28 via 10\.240\.0\.50 dev eth0/.test(kernelRoutes('w1')), 30_000, () => kernelRoutes('w1'));
    assert.match(execFileSync('cat', [`${CL}/run/kni-w1.log`], { encoding: 'utf8' }), /the route to node kc-extra's pods 10\.244\.200\.0\/28 was gone from the kernel; installed again/);
    await waitFor(() => noticed() > noticedBefore, 10_000, () => "kni did not log the kernel's notice of the route's delete");
    // The vxlan device set down: IPv4 drops the routes through it with no notice of theirs; the
    // device's own going down has kni set it up and put them back at once.
    const noticedW2 = () => execFileSync('cat', [`${CL}/run/kni-w2.log`], { encoding: 'utf8' }).split('\n').filter((l) => l.includes("the kernel says a route of kni's was deleted, or its vxlan device")).length;
    const noticedW2Before = noticedW2();
    execFileSync('ip', ['-n', 'kc-w2', 'link', 'set', 'kni.vxlan', 'down']);
    await waitFor(() => noticedW2() > noticedW2Before, 10_000, () => "kni did not log the kernel's notice of kni.vxlan going down");
    await waitFor(() => /10\.244\.200\.0\/28 via 10\.244\.200\.1 dev kni\.vxlan onlink/.test(kernelRoutes('w2')), 30_000, () => kernelRoutes('w2'));
    assert.match(execFileSync('ip', ['-n', 'kc-w2', 'link', 'show', 'kni.vxlan'], { encoding: 'utf8' }), /[<,]UP[,>]/);
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
    // IPv4's keep set: the refused 0.0.0.0/0 must not switch masquerading off (its IPv6 block, only unreachable, is a pod CIDR of the cluster).
    const masq = () => JSON.stringify(masqueradeTable('kc-w1')?.kept[4]);
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

  it('many peers: knictl node sums up the routes and lists only the peers with a problem (--all-peers: every one); the probe\'s Events fold them into one', async () => {
    const many = Array.from({ length: 45 }, (_, i) => fakeNode(`kc-many-${i}`, 'kni.test/many', `10.244.${100 + i}.0/24`, i ? `10.240.0.${100 + i}` : 'not-an-ip')).join('---\n');
    const text = (...args: string[]) => execFileSync(process.execPath, ['dist/plugin/knictl.js', '--socket', `${CL}/w1/root/run/kni/kni.sock`, 'node', ...args], { encoding: 'utf8' });
    const original: string = kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-config').data['config.yaml'];
    const probeEvery = (text: string) => kubectl('-n', 'kube-system', 'patch', 'configmap', 'kni-config', '--type', 'merge', '-p', JSON.stringify({ data: { 'config.yaml': text } }));
    const silentEvents = () => kubectlJson('get', 'events', '--field-selector', 'involvedObject.name=kc-w1,reason=PeerPodNetworkSilent').items.map((e: any) => e.message as string).filter((m: string) => m.includes('kc-many-'));
    probeEvery(`${original}\npeerProbe: {intervalSeconds: 2, timeoutSeconds: 1}\n`);
    apply(many);
    try {
      // These Nodes are made up: a probe that reached them in the meantime finds nothing, and lists them too.
      await waitFor(() => knictl('w1', 'node').cluster.peers.length === 46 && /^peers: 46 node\(s\); routes: 46 installed, 1 unreachable(; probes: .*)?$/m.test(text()), 30_000, () => text());
      const shown = text();
      const listed = shown.split('\n').filter((l) => /^kc-(many|w2)/.test(l));
      assert.ok(listed.some((l) => l.startsWith('kc-many-0 ')), shown);
      assert.ok(listed.every((l) => l.startsWith('kc-many-0 ') || / (SILENT|UNREACHABLE) since /.test(l)), shown);
      assert.match(shown, new RegExp(`^\\(${46 - new Set(listed.map((l) => l.split(' ')[0])).size} peer\\(s\\) with every route installed and answering not listed: --all-peers lists them\\)$`, 'm'));
      const all = text('--all-peers').split('\n').filter((l) => /^kc-(many|w2)/.test(l));
      assert.equal(all.length, 47, all.join('\n'));
      // 44 peers not answering: an Event each from every node would be a storm. A round's
      // changes of one kind over three go in one Event naming five (the routes may come over
      // two or three rounds).
      await waitFor(() => peerRoutes('w1').filter((r: any) => r.node.startsWith('kc-many-') && r.probe && r.probe !== 'answers').length === 44, 30_000, () => text());
      await waitFor(() => silentEvents().some((m: string) => /^kni's probe of \d+ peers' pod networks \(node kc-many-\d+ \(10\.244\.\d+\.0\/24[^)]*\), .*, and \d+ more: knictl node lists them\) through kni's routes gets no answer: what is between the nodes drops pods' packets, or those nodes are down/.test(m)), 30_000, () => silentEvents().join('\n'));
      assert.ok(silentEvents().length <= 6, `an Event for each of the peers: ${silentEvents().join('\n')}`);
    } finally {
      kubectl('delete', 'node', '-l', 'kni.test/many=1');
      probeEvery(original);
    }
    await waitFor(() => knictl('w1', 'node').cluster.peers.length === 1, 30_000, () => text());
    assert.doesNotMatch(kernelRoutes('w1'), /10\.244\.1[0-4][0-9]\./);
  });

  it('500 Nodes joining at once, then leaving, none reachable (vxlan, probes silent): every route follows, no turn of kni\'s event loop takes 50 ms of CPU, masquerade stays one rule per family, and nothing is written to this node\'s Node', async () => {
    // kni-w1 again with the turn probe: a turn's time on a CPU is kni's own, whatever the
    // machine's load (its stall as the event loop sees it counts its wait for a CPU too).
    const turnsFile = `${CL}/run/kni-w1.turns`;
    const restartKni = async (probe: boolean) => {
      cluster('kni-stop w1');
      if (probe) withTurnProbe(turnsFile, () => cluster('kni-restart w1'));
      else cluster('kni-restart w1');
      await waitFor(() => knictl('w1', 'node').ready === true && knictl('w1', 'node').cluster.api.connected === true, 60_000, () => execFileSync('tail', ['-5', `${CL}/run/kni-w1.log`], { encoding: 'utf8' }));
    };
    await restartKni(true);
    try {
      await joinAndLeave(turnsFile);
    } finally {
      await restartKni(false);
      fs.rmSync(turnsFile, { force: true });
    }
  });

  /** The 500 Nodes' test: kni-w1 runs with the turn probe writing to `turnsFile`. */
  async function joinAndLeave(turnsFile: string): Promise<void> {
    const metrics = () => execFileSync('ip', ['netns', 'exec', 'kc-w1', 'curl', '-s', '-m', '5', 'http://127.0.0.1:9273/metrics'], { encoding: 'utf8' });
    // prom-client's event-loop lag: its histogram starts again at each scrape.
    const lagMax = () => Number(/^kni_nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(metrics())![1]);
    const unavailable = () => condition(node('kc-w1'), 'NetworkUnavailable');
    await waitFor(() => unavailable()?.status === 'False', 30_000, () => JSON.stringify(unavailable()));
    const before = unavailable();
    const scale = Array.from({ length: 500 }, (_, i) => fakeNode(`kc-scale-${i}`, 'kni.test/scale', `10.${200 + (i >> 8)}.${i & 255}.0/24`, `172.30.${i >> 7}.${(i & 127) + 1}`)).join('---\n');
    const scaleRoutes = () => peerRoutes('w1').filter((r: any) => r.node.startsWith('kc-scale-'));
    const lags: number[] = [];
    lagMax();
    // kni's own start (its modules, its first list and check) is not what this test measures.
    const since = Date.now();
    apply(scale);
    try {
      await waitFor(() => scaleRoutes().filter((r: any) => r.state === 'installed').length === 500, 180_000, () => `${scaleRoutes().filter((r: any) => r.state === 'installed').length} of 500 routes`);
      lags.push(lagMax());
      // One rule per family whatever the peers; each peer's block an element of the peers' set.
      const masq = masqueradeTable('kc-w1')!;
      assert.equal(masq.rules.length, 2, masq.rules.join('\n'));
      assert.ok(['10.200.0.0/24', '10.201.243.0/24'].every((c) => masq.kept[4].includes(c)), `the masquerade sets lack peers' blocks: ${masq.kept[4].slice(0, 20).join(' ')} …`);
    } finally {
      kubectl('delete', 'node', '-l', 'kni.test/scale=1', '--wait=false');
    }
    await waitFor(() => scaleRoutes().length === 0, 180_000, () => `${scaleRoutes().length} routes left`);
    lags.push(lagMax());
    // The lag counts the time kni waits for a CPU too: the API server, etcd, the controller
    // manager and kubectl take both vCPUs while 500 Nodes arrive. Generous, to catch stalls of
    // seconds, as a pass over every peer per Node event made at 5,000; kni's own part of a turn
    // is its time on a CPU (bench:scale: at most 21–24 ms at 5,000 Nodes).
    const turns = longTurns(turnsFile).filter((t) => t.at >= since);
    const cpu = Math.max(0, ...turns.map((t) => t.cpu));
    process.stdout.write(`      kni's longest event-loop stall: ${lags.map((l) => `${Math.round(l * 1000)} ms`).join(' joining, ')} leaving; its longest turn on a CPU ${Math.round(cpu)} ms (${turns.length} turns of 20 ms or more)\n`);
    assert.ok(Math.max(...lags) < 1, `kni's event loop stalled ${lags.map((l) => `${Math.round(l * 1000)} ms`).join(', ')}`);
    assert.ok(cpu < 50, `a turn of kni's took ${Math.round(cpu)} ms of CPU: ${JSON.stringify(turns.filter((t) => t.cpu >= 50))}`);
    await new Promise((r) => setTimeout(r, 2000));
    assert.deepEqual(unavailable(), before, 'kni wrote its Node for peers coming and going');
  }

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
    // waits out the scheduler's own view of the Node, which may trail the API by a moment: a pod
    // it binds to kc-w1 before it has the taint waits in ContainerCreating for an address (as any
    // such pod would: Kubernetes' taints are seen late by design), and is made again until one
    // stays Pending. (A Deployment made at once had a pod bound to kc-w1 that way.)
    await waitFor(async () => {
      const pinned = `pinned-${Date.now().toString(36)}`;
      apply(`apiVersion: v1
kind: Pod
metadata: {name: ${pinned}, labels: {app: fill}}
spec:
  nodeSelector: {kubernetes.io/hostname: kc-w1}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers: [{name: c, image: kni.local/e2e:1, imagePullPolicy: Never, command: ["/pause"]}]
`);
      try {
        let scheduled: any;
        await waitFor(() => !!(scheduled = kubectlJson('get', 'pod', pinned).status.conditions?.find((c: any) => c.type === 'PodScheduled')), 30_000, () => `${pinned} never considered by the scheduler`);
        if (scheduled.status === 'True') return false;
        assert.match(scheduled.message, /1 node\(s\) had untolerated taint/);
        return true;
      } finally {
        kubectl('delete', 'pod', pinned, '--wait=false');
      }
    }, 120_000, () => kubectl('get', 'pods', '-o', 'wide'), 1000);
    assert.deepEqual(node('kc-w1').spec.taints.map((t: any) => `${t.key}:${t.effect}`), ['kni.dev/ipam-exhausted:NoSchedule']);
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

  it('ConfigMap edits: an invalid one and one needing a restart are refused with an Event (the same refusal again counted on it) and kni keeps serving; log level, backend and nonMasqueradeCIDRs change live (host-gw cannot reach the other subnet: reported, NetworkUnavailable True; back to auto: vxlan again); deleted, kni keeps its config and says so', async () => {
    const cm = kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-config');
    const original: string = cm.data['config.yaml'];
    const edit = (text: string) => kubectl('-n', 'kube-system', 'patch', 'configmap', 'kni-config', '--type', 'merge', '-p', JSON.stringify({ data: { 'config.yaml': text } }));
    const events = () => kubectlJson('-n', 'kube-system', 'get', 'events', '--field-selector', 'involvedObject.name=kni-config').items;
    try {
      edit(`${original}\nmtu: 12\n`);
      await waitFor(() => events().some((e: any) => e.reason === 'ConfigRefused' && /mtu 12 is not "auto" or an integer from 576/.test(e.message)), 30_000, () => JSON.stringify(events()));
      // The same refusal again is counted on the Event recorded (kubectl describe: "x2"), as the kubelet's recorder does.
      const mtuRefused = () => events().filter((e: any) => e.reason === 'ConfigRefused' && /^kni on kc-w1 .*mtu 12 is not/.test(e.message));
      edit(`${original}\nmtu: 12\n# the same, again\n`);
      await waitFor(() => mtuRefused().some((e: any) => e.count === 2), 30_000, () => JSON.stringify(mtuRefused()));
      assert.equal(mtuRefused().length, 1, JSON.stringify(mtuRefused()));
      edit(`${original}\nbridge: other0\n`);
      await waitFor(() => events().some((e: any) => e.reason === 'ConfigRefused' && /bridge cannot change while kni runs/.test(e.message)), 30_000, () => JSON.stringify(events()));
      assert.equal(knictl('w1', 'node').networks[0].bridge, 'kni0');
      assert.equal(knictl('w1', 'node').ready, true);

      const logLines = () => execFileSync('cat', [`${CL}/run/kni-w1.log`], { encoding: 'utf8' }).split('\n').filter((l) => l.includes('"level":"debug"')).length;
      const before = logLines();
      // host-gw cannot reach a node on another subnet: reported, and NetworkUnavailable says so.
      assert.match(original, /^backend: auto$/m);
      edit(`${original.replace(/^backend: auto$/m, 'backend: host-gw')}\nlogLevel: debug\nnonMasqueradeCIDRs: [10.240.0.1/32]\n`);
      // A network the pods reach with their own address: in the masquerade keep set at once.
      const keep4 = () => masqueradeTable('kc-w1')!.sets.keep4;
      await waitFor(() => keep4().includes('10.240.0.1'), 30_000, () => keep4().join(' '));
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
    assert.ok(!masqueradeTable('kc-w1')!.sets.keep4.includes('10.240.0.1'), masqueradeTable('kc-w1')!.sets.keep4.join(' '));
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
