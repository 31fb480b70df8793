// The example extension as users deploy it: kni's DaemonSet and the mesh-redirect DaemonSet
// (kind-config/mesh-redirect-daemonset.yaml, kni's image) on the test cluster. Pods created
// after registration get the redirect; an extension failure makes pod creation fail with its
// message in the pod's events, and the pod starts once the extension recovers; a restarted
// kni keeps the registration.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { packageRoot } from '../../plugin/server/protos';
import { waitFor } from '../helpers/wait';
import { apply, CL, cluster, knictlInPod, kubectl, kubectlJson } from './cluster-helpers';

const POD = (name: string) => `apiVersion: v1
kind: Pod
metadata: {name: ${name}}
spec:
  nodeName: kc-w1
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers: [{name: c, image: kni.local/e2e:1, imagePullPolicy: Never, command: ["/pause"]}]
`;
/** The API server's audit log (hack/cluster/cluster.sh: every request of kni's ServiceAccount, and Pod reads). */
const AUDIT = `${CL}/audit.log`;
/** kni's requests the audit log recorded after its first `from` bytes. */
const kniRequestsSince = (from: number): any[] => {
  const fd = fs.openSync(AUDIT, 'r');
  const buf = Buffer.alloc(fs.statSync(AUDIT).size - from);
  fs.readSync(fd, buf, 0, buf.length, from);
  fs.closeSync(fd);
  return buf.toString('utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter((e) => e.user?.username === 'system:serviceaccount:kube-system:kni');
};
const phase = (name: string) => kubectlJson('get', 'pod', name).status.phase;
/** The pod's nat OUTPUT rules, read inside its netns (entered from the node's mount namespace). */
const podNat = (name: string): string => {
  const p = knictlInPod('kc-w1', 'pods').find((x: any) => x.pod?.name === name);
  return execFileSync('nsenter', [`--mount=${CL}/mnt/w1`, 'nsenter', `--net=${p.netns_path}`, 'iptables', '-t', 'nat', '-S', 'OUTPUT'], { encoding: 'utf8' });
};

describe('cluster: the example mesh-redirect extension as a DaemonSet', function () {
  this.timeout(300_000);
  const failFile = `${CL}/w1/root/run/kni-extensions/fail-mesh`;

  before(() => {
    cluster('down');
    cluster('up');
    cluster('kni-daemonset');
    // The shipped manifest, plus the example's testing switch: a file that makes it fail.
    const ds = YAML.parse(fs.readFileSync(path.join(packageRoot(), 'kind-config/mesh-redirect-daemonset.yaml'), 'utf8'));
    ds.spec.template.spec.containers[0].command.push('--fail-file', '/run/kni-extensions/fail-mesh');
    apply(YAML.stringify(ds));
    kubectl('-n', 'kube-system', 'rollout', 'status', 'daemonset/mesh-redirect', '--timeout=120s');
  });
  after(() => {
    cluster('down');
  });

  it('registers with kni on every node, healthy', async () => {
    for (const node of ['kc-w1', 'kc-w2']) {
      await waitFor(() => knictlInPod(node, 'extensions').some((x: any) => x.name === 'mesh-redirect' && x.healthy), 60_000, () => JSON.stringify(knictlInPod(node, 'extensions')));
    }
  });

  it('kni looks at an owner on its own node in its watch of the node\'s Pods: no request of the API server for it, nor any other while nothing changes', async () => {
    const owners = ['kc-w1', 'kc-w2'].map((node) => knictlInPod(node, 'extensions')[0].owner.name as string);
    const from = fs.statSync(AUDIT).size;
    // Three of the owner check's rounds (every 2 s).
    await new Promise((r) => setTimeout(r, 7000));
    const kni = kniRequestsSince(from);
    assert.deepEqual(kni.filter((e) => e.verb === 'get' && owners.includes(e.objectRef?.name)).map((e) => e.objectRef.name), [], 'kni asked the API server for owners on its own node');
    // Nor anything else while nothing changes: its watches (and a relist, should one end) only.
    assert.deepEqual(kni.filter((e) => e.verb !== 'watch' && e.verb !== 'list').map((e) => `${e.verb} ${e.requestURI}`), [], 'kni asked the API server for something in a quiet moment');
    // The counts are not vacuous: the audit log has kni's requests (its lists and watches from
    // its start), and records Pod reads (kubectl's here).
    assert.match(fs.readFileSync(AUDIT, 'utf8'), /"verb":"watch".*"username":"system:serviceaccount:kube-system:kni"/);
    kubectl('-n', 'kube-system', 'get', 'pod', owners[0]);
    await waitFor(() => fs.readFileSync(AUDIT, 'utf8').slice(from).includes(`"name":"${owners[0]}"`), 10_000, () => 'the audit log recorded no Pod read');
  });

  it('a pod created afterwards has the redirect of its outbound TCP in its netns', async () => {
    apply(POD('meshed'));
    await waitFor(() => phase('meshed') === 'Running', 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    assert.match(podNat('meshed'), /-j REDIRECT --to-ports 15001/);
  });

  it('the extension failing: the pod does not start and its events carry the message; it starts once the extension recovers', async () => {
    fs.writeFileSync(failFile, 'sidecar injector not ready');
    try {
      apply(POD('blocked'));
      const events = () => kubectlJson('get', 'events', '--field-selector', 'involvedObject.name=blocked').items.map((e: any) => `${e.reason}: ${e.message}`).join('\n');
      await waitFor(() => /extension mesh-redirect failed .*sidecar injector not ready/.test(events()), 90_000, () => events());
      assert.notEqual(phase('blocked'), 'Running');
    } finally {
      fs.rmSync(failFile, { force: true });
    }
    await waitFor(() => phase('blocked') === 'Running', 180_000, () => kubectl('get', 'pods', '-o', 'wide'));
    assert.match(podNat('blocked'), /REDIRECT/);
  });

  it('kni\'s pod replaced (a restart or an upgrade): the registration is still there', async () => {
    const old = kubectlJson('-n', 'kube-system', 'get', 'pods', '-l', 'app=kni', '--field-selector', 'spec.nodeName=kc-w1').items[0].metadata.name;
    kubectl('-n', 'kube-system', 'delete', 'pod', old, '--wait=true');
    await waitFor(() => knictlInPod('kc-w1', 'extensions').some((x: any) => x.name === 'mesh-redirect'), 120_000, () => kubectl('-n', 'kube-system', 'get', 'pods', '-o', 'wide'));
    apply(POD('after-restart'));
    await waitFor(() => phase('after-restart') === 'Running', 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    assert.match(podNat('after-restart'), /REDIRECT/);
  });

  it('the extension\'s DaemonSet deleted: once its pods are gone longer than ownerGraceSeconds (a live setting), kni drops the registration and pods start without it; it asked the API server once about each owner gone', async () => {
    const cm = kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-config');
    const text = `${cm.data['config.yaml']}\nextensions: { ownerGraceSeconds: 10 }\n`;
    kubectl('-n', 'kube-system', 'patch', 'configmap', 'kni-config', '--type', 'merge', '-p', JSON.stringify({ data: { 'config.yaml': text } }));
    const owners = ['kc-w1', 'kc-w2'].map((node) => knictlInPod(node, 'extensions')[0].owner.name as string);
    assert.ok(owners.every((o) => o.startsWith('mesh-redirect-')), 'the example did not say which pod registered');
    const from = fs.statSync(AUDIT).size;
    kubectl('-n', 'kube-system', 'delete', 'daemonset', 'mesh-redirect', '--wait=true');
    for (const node of ['kc-w1', 'kc-w2']) await waitFor(() => knictlInPod(node, 'extensions').length === 0, 90_000, () => JSON.stringify(knictlInPod(node, 'extensions')));
    // Five of the check's rounds in the grace: the owner's 404 is taken as final (a uid never
    // comes back), not asked again each round. Each kni asks about its own node's owner only.
    const asked = kniRequestsSince(from).filter((e) => e.verb === 'get' && e.objectRef?.resource === 'pods').map((e) => e.objectRef.name).sort();
    assert.deepEqual(asked, [...owners].sort(), 'kni asked the API server about a gone owner other than once');
    apply(POD('unmeshed'));
    await waitFor(() => phase('unmeshed') === 'Running', 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    assert.doesNotMatch(podNat('unmeshed'), /REDIRECT/);
  });
});
