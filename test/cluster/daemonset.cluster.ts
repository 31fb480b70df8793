// kni deployed as users deploy it: the DaemonSet of kind-config/kni-daemonset.yaml, from the
// image hack/build-image.sh builds here, loaded onto the nodes without a registry.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { waitFor } from '../helpers/wait';
import { apply, CL, cluster, knictlInPod, kniVeths, kubectl, kubectlJson, ready, runningPods, WEB } from './cluster-helpers';

const nodesReady = () => kubectlJson('get', 'nodes').items.every((n: any) => ready(n).status === 'True');

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
  });

  it('kni\'s pod deleted while pods are being created: the DaemonSet restarts it, no pod is stuck, nothing leaks', async () => {
    apply(WEB(14));
    const victim = kubectlJson('-n', 'kube-system', 'get', 'pods', '-l', 'app=kni', '--field-selector', 'spec.nodeName=kc-w1').items[0].metadata.name;
    kubectl('-n', 'kube-system', 'delete', 'pod', victim, '--wait=false');
    await waitFor(() => runningPods().length === 14, 180_000, () => kubectl('get', 'pods', '-o', 'wide'));
    // knictl fails until the new kni pod serves: waitFor takes that as not yet.
    await waitFor(() => knictlInPod('kc-w1', 'pods').length === runningPods().filter((p: any) => p.spec.nodeName === 'kc-w1').length, 120_000, () => kubectl('-n', 'kube-system', 'get', 'pods', '-o', 'wide'));
    for (const w of ['w1', 'w2']) assert.equal(kniVeths(w).length, runningPods().filter((p: any) => p.spec.nodeName === `kc-${w}`).length, `veths on kc-${w}`);
  });

  it('deleting the DaemonSet (preStop --uninstall) takes its conflist and kni-cni away, and the nodes report the network not ready', async () => {
    kubectl('delete', 'deployment', 'web', '--wait=true');
    kubectl('-n', 'kube-system', 'delete', 'daemonset', 'kni', '--wait=true');
    await waitFor(() => kubectlJson('get', 'nodes').items.every((n: any) => ready(n).status === 'False'), 120_000, () => kubectl('get', 'nodes'));
    for (const n of kubectlJson('get', 'nodes').items) assert.match(ready(n).message, /network/i);
    for (const w of ['w1', 'w2']) {
      assert.deepEqual(fs.readdirSync(`${CL}/${w}/root/etc/cni/net.d`), [], `conflist left on kc-${w}`);
      assert.ok(!fs.existsSync(`${CL}/${w}/root/opt/cni/bin/kni-cni`), `kni-cni left on kc-${w}`);
    }
  });
});
