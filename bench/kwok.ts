// kwok (sigs.k8s.io/kwok, built by build-components.sh kwok at versions.env's version) keeping
// made-up Nodes, and the Pods bound to them, as kubelets would: the stages named are its own
// (kustomize/stage/<kind>/<stage> in its module), read from the module cache, not copied here.
// It manages only Nodes annotated kwok.x-k8s.io/node=fake.
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import { BIN, CL, KUBECONFIG } from '../test/cluster/cluster-helpers';

export const KWOK_NODE_ANNOTATION = { 'kwok.x-k8s.io/node': 'fake' };
export const KWOK_TAINT = { key: 'kwok.x-k8s.io/node', value: 'fake', effect: 'NoSchedule' };

/** Builds kwok if needed and starts it with its stages (e.g. "node/fast/node-initialize.yaml"); its log in the cluster's run dir. */
export function startKwok(stages: string[], leaseSeconds: number): ChildProcess {
  execFileSync('bash', ['hack/cluster/build-components.sh', 'kwok'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const modules = execFileSync('go', ['env', 'GOMODCACHE'], { encoding: 'utf8', env: { ...process.env, GOPATH: process.env.GOPATH ?? `${process.env.KNI_CLUSTER_CACHE ?? '/var/cache/kni-cluster'}/gopath` } }).trim();
  const version = /KWOK_VERSION=(\S+)/.exec(fs.readFileSync('hack/cluster/versions.env', 'utf8'))![1];
  fs.writeFileSync(`${CL}/kwok.yaml`, stages.map((s) => fs.readFileSync(`${modules}/sigs.k8s.io/kwok@${version}/kustomize/stage/${s}`, 'utf8')).join('\n---\n'));
  const log = fs.openSync(`${CL}/run/kwok.log`, 'a');
  return spawn(`${BIN}/kwok`, ['--kubeconfig', KUBECONFIG, '--config', `${CL}/kwok.yaml`, '--manage-all-nodes=false', '--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake', `--node-lease-duration-seconds=${leaseSeconds}`, '-v=WARN'], { stdio: ['ignore', log, log] });
}
