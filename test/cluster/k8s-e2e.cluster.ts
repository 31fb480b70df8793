// The Kubernetes e2e suite's network conformance specs, written by the people who define what a
// cluster network must do, against the test cluster with kni as its network: e2e.test and the
// agnhost image built from k8s.io/kubernetes at the cluster's version (build-components.sh
// k8s-e2e; hack/k8s-e2e/agnhost-image.sh), the image imported into every worker's containerd
// under the name the e2e framework asks for.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';
import { runGinkgoSuite } from '../helpers/junit';
import { RUN } from '../helpers/sh';
import { BIN, CL, cluster, KUBECONFIG, WORKERS } from './cluster-helpers';

const AGNHOST = 'registry.k8s.io/e2e-test-images/agnhost:2.56';
/** The specs run: the pod-to-pod and node-to-pod conformance specs of the Networking Granular Checks. */
const FOCUS = String.raw`\[sig-network\] Networking Granular Checks: Pods .*\[Conformance\]`;

describe('cluster: the Kubernetes e2e network conformance specs pass with kni', function () {
  this.timeout(1_800_000);
  const reports = `/tmp/${RUN}-k8s-e2e`;

  before(() => {
    for (const tool of ['e2e.test', 'agnhost']) assert.ok(fs.existsSync(`${BIN}/${tool}`), `${BIN}/${tool} is missing: run bash hack/cluster/build-components.sh k8s-e2e`);
    cluster('down');
    cluster('up');
    cluster('kni');
    const tar = `${CL}/agnhost.tar`;
    execFileSync('bash', [path.join(packageRoot(), 'hack/k8s-e2e/agnhost-image.sh'), `${BIN}/agnhost`, tar, AGNHOST]);
    for (const w of WORKERS) execFileSync(`${BIN}/ctr`, ['-a', `${CL}/${w}/root/run/containerd/containerd.sock`, '-n', 'k8s.io', 'images', 'import', tar], { stdio: 'ignore' });
    fs.rmSync(reports, { recursive: true, force: true });
    fs.mkdirSync(reports, { recursive: true });
  });
  after(() => {
    cluster('down');
    fs.rmSync(reports, { recursive: true, force: true });
  });

  it(`every spec matching ${FOCUS} passes`, async () => {
    const all = await runGinkgoSuite(`${BIN}/e2e.test`, [
      `--kubeconfig=${KUBECONFIG}`, '--provider=local', `--num-nodes=${WORKERS.length}`,
      `--report-dir=${reports}`, `--ginkgo.focus=${FOCUS}`, '--ginkgo.no-color', '--ginkgo.timeout=25m',
    ], reports, 1_700_000);
    const specs = [...all].filter(([, s]) => s.verdict !== 'skipped');
    process.stdout.write(`      ${specs.length} specs run: ${specs.map(([n, s]) => `\n        ${s.verdict}: ${n}`).join('')}\n`);
    assert.ok(specs.length >= 4, `fewer specs ran than focused: ${specs.length}`);
    const failed = specs.filter(([, s]) => s.verdict === 'failed');
    assert.deepEqual(failed.map(([n]) => n), [], failed.map(([n, s]) => `${n}:\n${s.failure.slice(0, 2000)}`).join('\n\n'));
  });
});
