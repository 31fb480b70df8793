// kni deployed as users deploy it: the DaemonSet of kind-config/kni-daemonset.yaml, from the
// image hack/build-image.sh builds here, loaded onto the nodes without a registry.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { formatIp, parseCidr } from '../../plugin/ipam/ip';
import { packageRoot } from '../../plugin/server/protos';
import { waitFor } from '../helpers/wait';
import { apply, CL, cluster, getFromNode, knictlInPod, kniVeths, kubectl, kubectlJson, POD, ready, runningPods, WEB } from './cluster-helpers';

const nodesReady = () => kubectlJson('get', 'nodes').items.every((n: any) => ready(n).status === 'True');
const conflistInode = (w: string) => fs.statSync(`${CL}/${w}/root/etc/cni/net.d/10-kni.conflist`).ino;
const readyTransition = (node: string) => ready(kubectlJson('get', 'node', node)).lastTransitionTime as string;
/** What of kni's node network and state is still on a worker (kni0, its routes, its chains, its state dir). */
const kniLeftOn = (w: string): string[] => {
  const sh = (cmd: string, ...args: string[]) => execFileSync('ip', ['netns', 'exec', `kc-${w}`, cmd, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  return [
    ...sh('ip', '-o', 'link', 'show').split('\n').filter((l) => /: kni(0|\.vxlan)[:@]/.test(l)).map((l) => `link ${l.split(':')[1].trim()}`),
    ...['-4', '-6'].flatMap((f) => sh('ip', f, 'route', 'show', 'proto', '107').split('\n').filter(Boolean).map((r) => `route ${r}`)),
    // Whichever backend kni chose (both hold tables on this machine).
    ...['iptables', 'ip6tables'].flatMap((t) => ['nft', 'legacy'].flatMap((b) => sh(`${t}-${b}-save`).split('\n').filter((l) => l.includes('KNI-')))),
    ...sh('nft', 'list', 'tables').split('\n').filter((l) => /^table \S+ kni\b/.test(l)),
    ...fs.readdirSync(`${CL}/${w}/root/var/lib/kni`).map((f) => `state ${f}`),
  ];
};
const kniPodOn = (node: string): string => kubectlJson('-n', 'kube-system', 'get', 'pods', '-l', 'app=kni', '--field-selector', `spec.nodeName=${node}`).items.find((p: any) => !p.metadata.deletionTimestamp)?.metadata.name ?? '';

describe('cluster: kni as a DaemonSet from its image', function () {
  this.timeout(300_000);

  before(() => {
    cluster('down');
    cluster('up');
  });
  after(() => {
    cluster('down');
  });

  it('runs on every worker from the image built here; nodes become Ready; kubectl logs shows its JSON lines', async () => {
    assert.ok(!nodesReady(), 'nodes Ready before kni runs');
    cluster('kni-daemonset');
    const pods = kubectlJson('-n', 'kube-system', 'get', 'pods', '-l', 'app=kni').items;
    assert.deepEqual(pods.map((p: any) => p.spec.nodeName).sort(), ['kc-w1', 'kc-w2']);
    for (const p of pods) assert.equal(p.status.phase, 'Running');
    await waitFor(nodesReady, 60_000, () => kubectl('get', 'nodes'));
    // Its readiness probe (GET /readyz on the node's loopback) passed: a rollout waits for it.
    await waitFor(() => kubectlJson('-n', 'kube-system', 'get', 'pods', '-l', 'app=kni').items.every((p: any) => ready(p)?.status === 'True'), 60_000, () => kubectl('-n', 'kube-system', 'get', 'pods', '-o', 'wide'));
    assert.equal(execFileSync('ip', ['netns', 'exec', 'kc-w1', 'curl', '-s', '-m', '5', 'http://127.0.0.1:9273/readyz'], { encoding: 'utf8' }), 'ready\n');
    const logs = kubectl('-n', 'kube-system', 'logs', pods[0].metadata.name).split('\n').filter(Boolean).map((l) => JSON.parse(l));
    assert.ok(logs.some((l) => l.msg === 'serving'));
    assert.ok(logs.some((l) => l.msg === 'registered with the runtime over NRI'), 'no NRI registration with containerd 2.x');
  });

  it('pods get dual-stack IPs, and knictl in each kni pod lists every pod of its node', async () => {
    apply(WEB(6));
    await waitFor(() => runningPods().length === 6, 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    for (const node of ['kc-w1', 'kc-w2']) {
      const want = runningPods().filter((p: any) => p.spec.nodeName === node).map((p: any) => p.metadata.name).sort();
      const have = knictlInPod(node, 'pods').map((p: any) => p.pod.name).sort();
      assert.deepEqual(have, want, node);
    }
    // knictl trace in the image, with the DaemonSet's own rights: a pod to the other node's pod
    // range, and to the API's Service (its ServiceCIDR, Service and endpoint read with the pod's token).
    const from = runningPods()[0];
    const here = from.spec.nodeName;
    const other = parseCidr(kubectlJson('get', 'node', here === 'kc-w1' ? 'kc-w2' : 'kc-w1').spec.podCIDRs[0]);
    const peer = knictlInPod(here, 'trace', from.metadata.name, formatIp(other.family, other.base + 1n));
    assert.deepEqual([peer.kind, peer.ok], ['peer-pod', true], JSON.stringify(peer));
    // The other node's kni says what that address is there: its own (its pods' gateway).
    assert.match(peer.hops.at(-1).what, /^\S+ is this node's own address \(kni0\)$/, JSON.stringify(peer));
    const api = knictlInPod(here, 'trace', from.metadata.name, kubectlJson('get', 'service', 'kubernetes').spec.clusterIP);
    assert.deepEqual([api.kind, api.ok], ['service', true], JSON.stringify(api));
    // Its Service and endpoint read with the pod's rights (IPAddresses, Services, EndpointSlices).
    assert.match(api.hops[1].what, /is Service default\/kubernetes's ClusterIP .*: the node's service proxy rewrites it to its only ready endpoint; kube-proxy \(iptables mode\) has taken it up on this node$/, JSON.stringify(api));
    assert.match(api.hops[2].what, /^endpoint: \S+ is outside the pod networks/, JSON.stringify(api));
    // The same by name: the Service's address read with the pod's rights too.
    assert.equal(knictlInPod(here, 'trace', from.metadata.name, 'service/default/kubernetes').destination, api.destination);
  });

  it('kni\'s pod deleted while pods are being created: the DaemonSet restarts it, no pod is stuck, nothing leaks; its conflist stays and the node stays Ready', async () => {
    apply(WEB(14));
    const before = conflistInode('w1');
    const readySince = readyTransition('kc-w1');
    const victim = kniPodOn('kc-w1');
    kubectl('-n', 'kube-system', 'delete', 'pod', victim, '--wait=false');
    await waitFor(() => runningPods().length === 14, 180_000, () => kubectl('get', 'pods', '-o', 'wide'));
    // knictl fails until the new kni pod serves: waitFor takes that as not yet.
    await waitFor(() => knictlInPod('kc-w1', 'pods').length === runningPods().filter((p: any) => p.spec.nodeName === 'kc-w1').length, 120_000, () => kubectl('-n', 'kube-system', 'get', 'pods', '-o', 'wide'));
    for (const w of ['w1', 'w2']) assert.equal(kniVeths(w).length, runningPods().filter((p: any) => p.spec.nodeName === `kc-${w}`).length, `veths on kc-${w}`);
    // The preStop kept the conflist (never removed, so never written again) and said why.
    assert.equal(conflistInode('w1'), before, 'the conflist on kc-w1 was removed and written again');
    assert.equal(readyTransition('kc-w1'), readySince, 'kc-w1 went NotReady while kni restarted');
  });

  it('a rolling restart of the DaemonSet (kubectl rollout restart) keeps every node Ready and its conflist in place', async () => {
    const before = { w1: conflistInode('w1'), w2: conflistInode('w2') };
    const readySince = { w1: readyTransition('kc-w1'), w2: readyTransition('kc-w2') };
    const old = new Set(['kc-w1', 'kc-w2'].map(kniPodOn));
    kubectl('-n', 'kube-system', 'rollout', 'restart', 'daemonset/kni');
    kubectl('-n', 'kube-system', 'rollout', 'status', 'daemonset/kni', '--timeout=180s');
    await waitFor(() => ['kc-w1', 'kc-w2'].every((n) => !old.has(kniPodOn(n))), 60_000, () => kubectl('-n', 'kube-system', 'get', 'pods', '-o', 'wide'));
    for (const w of ['w1', 'w2'] as const) {
      assert.equal(conflistInode(w), before[w], `the conflist on kc-${w} was removed and written again`);
      assert.equal(readyTransition(`kc-${w}`), readySince[w], `kc-${w} went NotReady during the rollout`);
    }
    // The old pods' preStops said why on each Pod (their output is seen by no one).
    // Best effort (the Event has a short budget inside the pod's grace): one at least, each saying why.
    const kept = () => kubectlJson('-n', 'kube-system', 'get', 'events', '--field-selector', 'reason=CNIConfigKept').items.filter((e: any) => old.has(e.involvedObject.name));
    await waitFor(() => kept().length > 0, 30_000, () => kubectl('-n', 'kube-system', 'get', 'events'));
    for (const e of kept()) assert.match(e.message, /kni's CNI config and kni-cni stay on this node: its DaemonSet kni stays/);
    // And the new kni pods wire pods.
    apply(WEB(16));
    await waitFor(() => runningPods().length === 16, 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
  });

  it('a NetworkAttachmentDefinition whose plugin is installed only on the host runs it chrooted in the host\'s root (KNI_CHROOT_DIR=/host, as Multus thick\'s chrootDir)', async () => {
    // Its interpreter, /bin/busybox, is the host's: kni's image has none, so it runs only chrooted.
    const proof = `${CL}/w1/hostonly-${process.pid}.log`;
    const plugin = `${CL}/w1/root/opt/cni/bin/kni-test-hostonly`;
    fs.writeFileSync(plugin, ['#!/bin/busybox sh', '/bin/busybox cat > /dev/null', `echo "$CNI_COMMAND $CNI_IFNAME" >> ${proof}`, '[ "$CNI_COMMAND" = ADD ] && echo \'{"cniVersion":"1.0.0","interfaces":[],"ips":[{"address":"10.123.0.5/24"}]}\'', 'exit 0', ''].join('\n'), { mode: 0o755 });
    try {
      apply(`apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: hostonly, namespace: default}\nspec:\n  config: '{"cniVersion": "1.0.0", "type": "kni-test-hostonly"}'\n`);
      apply(POD('chrooted', 'w1', { annotations: { 'k8s.v1.cni.cncf.io/networks': 'hostonly' } }));
      await waitFor(() => kubectlJson('get', 'pod', 'chrooted').status.phase === 'Running', 120_000, () => kubectl('describe', 'pod', 'chrooted'));
      const status = JSON.parse(kubectlJson('get', 'pod', 'chrooted').metadata.annotations['k8s.v1.cni.cncf.io/network-status'] ?? '[]');
      assert.deepEqual(status.find((n: any) => n.interface === 'net1')?.ips, ['10.123.0.5'], JSON.stringify(status));
      assert.match(fs.readFileSync(proof, 'utf8'), /^ADD net1$/m);
      kubectl('delete', 'pod', 'chrooted', '--wait=true');
      await waitFor(() => /^DEL net1$/m.test(fs.readFileSync(proof, 'utf8')), 60_000, () => fs.readFileSync(proof, 'utf8'));
    } finally {
      fs.rmSync(plugin, { force: true });
      fs.rmSync(proof, { force: true });
    }
  });

  it('a node the DaemonSet no longer selects (its nodeSelector changed) loses kni\'s conflist, kni-cni and node network; the node it still selects keeps them through the rollout', async () => {
    // The pods first, while kni runs on both nodes: without a CNI config the runtime cannot stop a
    // sandbox (containerd's teardown needs one), so pods left on kc-w2 would stay Terminating.
    kubectl('delete', 'deployment', 'web', '--wait=true');
    // Its pods go after it (the garbage collector's, in the background): gone from kni's network too.
    await waitFor(() => kubectlJson('get', 'pods').items.length === 0 && kniVeths('w2').length === 0, 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    const w1 = conflistInode('w1');
    const gone = kniPodOn('kc-w2');
    kubectl('-n', 'kube-system', 'patch', 'daemonset', 'kni', '--type', 'merge', '-p', '{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":"kc-w1"}}}}}');
    await waitFor(() => !fs.existsSync(`${CL}/w2/root/etc/cni/net.d/10-kni.conflist`), 120_000, () => kubectl('-n', 'kube-system', 'get', 'pods', '-o', 'wide'));
    // kni-cni goes right after the conflist (so the runtime stops calling it first): on a busy
    // machine the check can land between the two.
    await waitFor(() => !fs.existsSync(`${CL}/w2/root/opt/cni/bin/kni-cni`), 10_000, () => 'kni-cni left on kc-w2');
    kubectl('-n', 'kube-system', 'rollout', 'status', 'daemonset/kni', '--timeout=180s');
    assert.equal(conflistInode('w1'), w1, 'the conflist on kc-w1 was removed and written again');
    const removed = kubectlJson('-n', 'kube-system', 'get', 'events', '--field-selector', 'reason=CNIConfigRemoved').items.find((e: any) => e.involvedObject.name === gone);
    assert.match(removed?.message ?? '', /its DaemonSet kni no longer selects node kc-w2/, kubectl('-n', 'kube-system', 'get', 'events'));
    // No pod left on kni's network there: its node network and state went with it.
    await waitFor(() => kniLeftOn('w2').length === 0, 30_000, () => kniLeftOn('w2').join('\n'));
    assert.ok(['link kni0', 'table inet kni-masquerade'].every((x) => kniLeftOn('w1').some((l) => l.startsWith(x))), `kni left kc-w1 too: ${kniLeftOn('w1').join('\n')}`);
  });

  it('deleting kni\'s manifest (kubectl delete -f: the DaemonSet, its service account and rights) takes its conflist, kni-cni and node network away, and the nodes report the network not ready', async () => {
    // As users remove it; CRD too (no NADs here).
    kubectl('delete', '-f', path.join(packageRoot(), 'kind-config/kni-daemonset.yaml'), '--wait=true');
    await waitFor(() => kubectlJson('get', 'nodes').items.every((n: any) => ready(n).status === 'False'), 120_000, () => kubectl('get', 'nodes'));
    for (const n of kubectlJson('get', 'nodes').items) assert.match(ready(n).message, /network/i);
    for (const w of ['w1', 'w2']) {
      assert.deepEqual(fs.readdirSync(`${CL}/${w}/root/etc/cni/net.d`), [], `conflist left on kc-${w}`);
      assert.ok(!fs.existsSync(`${CL}/${w}/root/opt/cni/bin/kni-cni`), `kni-cni left on kc-${w}`);
    }
    await waitFor(() => kniLeftOn('w1').length === 0, 60_000, () => kniLeftOn('w1').join('\n'));
  });

  it('the next network on those nodes (the CNI reference plugins, whose bridge takes the same gateway address kni0 had) works: nothing of kni stands in its way', async () => {
    cluster('reference-cni');
    for (const w of ['w1', 'w2']) apply(POD(`next-${w}`, w));
    const ip = (name: string) => kubectlJson('get', 'pod', name).status.podIPs?.[0]?.ip as string | undefined;
    await waitFor(() => ['w1', 'w2'].every((w) => ip(`next-${w}`) && kubectlJson('get', 'pod', `next-${w}`).status.phase === 'Running'), 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    for (const w of ['w1', 'w2']) {
      // The node reaches its pod over the new bridge: no kni0 route to the same range in the way.
      assert.match(getFromNode(w, ip(`next-${w}`)!, 80), /^HTTP\/1\.[01] 200/);
      assert.deepEqual(kniLeftOn(w), [], `kc-${w}`);
    }
  });
});
