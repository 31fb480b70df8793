// What the cluster tests share: the cluster script, kubectl, and the web Deployment.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';

export const CL = process.env.KNI_CLUSTER_DIR ?? '/var/lib/kni-cluster';
export const KUBECONFIG = `${CL}/admin.kubeconfig`;
export const WORKERS = ['w1', 'w2'];
const script = path.join(packageRoot(), 'hack/cluster/cluster.sh');
export const BIN = `${process.env.KNI_CLUSTER_CACHE ?? '/var/cache/kni-cluster'}/bin`;

export const kubectl = (...args: string[]): string =>
  execFileSync(`${BIN}/kubectl`, ['--kubeconfig', KUBECONFIG, ...args], { encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
export const kubectlJson = (...args: string[]): any => JSON.parse(kubectl(...args, '-o', 'json'));
export const cluster = (cmd: string): string => {
  const r = spawnSync('bash', [script, ...cmd.split(' ')], { encoding: 'utf8', timeout: 600_000 });
  if (r.status !== 0) throw new Error(`cluster.sh ${cmd} failed (${r.status}):\n${r.stderr.slice(-3000)}`);
  return r.stdout;
};
/** cluster.sh up with a test's own shape of cluster: the KNI_CLUSTER_* variables `up` reads. */
export const clusterUp = (settings: Record<string, string> = {}): void => {
  const saved = Object.fromEntries(Object.keys(settings).map((k) => [k, process.env[k]]));
  Object.assign(process.env, settings);
  try {
    cluster('up');
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
};
/** kni on every worker (cluster.sh kni) with settings of a test's own added to its config (top-level YAML keys). */
export const kniWith = (settings: string): void => {
  const extra = `${CL}-kni-extra.yaml`;
  fs.writeFileSync(extra, settings);
  process.env.KNI_CLUSTER_KNI_EXTRA = extra;
  try {
    cluster('kni');
  } finally {
    delete process.env.KNI_CLUSTER_KNI_EXTRA;
    fs.rmSync(extra, { force: true });
  }
};
export const knictl = (w: string, ...args: string[]): any =>
  JSON.parse(execFileSync(process.execPath, [path.join(packageRoot(), 'dist/plugin/knictl.js'), '--socket', `${CL}/${w}/root/run/kni/kni.sock`, ...args, '-o', 'json'], { encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] }));
/** kni's peer routes on a worker as `knictl node` reports them, each with its node's name. */
export const peerRoutes = (w: string): any[] => knictl(w, 'node').cluster.peers.flatMap((p: any) => p.routes.map((r: any) => ({ node: p.name, ...r })));
/** knictl trace from node w, as JSON: a trace that finds a problem exits 2, and is an answer too. */
export function knictlTrace(w: string, pod: string, destination: string, ...options: string[]): any {
  const r = spawnSync(process.execPath, [path.join(packageRoot(), 'dist/plugin/knictl.js'), '--socket', `${CL}/${w}/root/run/kni/kni.sock`, 'trace', pod, destination, ...options, '-o', 'json'], { encoding: 'utf8' });
  if (r.status !== 0 && r.status !== 2) throw new Error(`knictl trace ${pod} ${destination} on ${w}: exit ${r.status}: ${r.stderr}`);
  const t = JSON.parse(r.stdout);
  assert.equal(r.status, t.ok ? 0 : 2, 'knictl trace exits 2 when a hop has a problem');
  return t;
}
export const kniVeths = (w: string): string[] =>
  execFileSync('ip', ['-n', `kc-${w}`, '-o', 'link', 'show'], { encoding: 'utf8' }).split('\n').map((l) => l.split(':')[1]?.trim().split('@')[0] ?? '').filter((n) => /^kni[0-9a-f]{12}$/.test(n));

/** The e2e image serving HTTP on :80 (indented for a pod spec at `indent`). */
const HTTPD = (indent: string, extra = '') => [
  'automountServiceAccountToken: false',
  'terminationGracePeriodSeconds: 1',
  'containers:',
  '- name: httpd',
  '  image: kni.local/e2e:1',
  '  imagePullPolicy: Never',
  '  command: ["/bin/busybox", "httpd", "-f", "-p", "80", "-h", "/www"]',
  ...(extra ? [`  ${extra}`] : []),
].map((l) => `${indent}${l}`).join('\n');

/** One httpd pod pinned to a worker, with a namespace, annotations and a hostPort when given. */
export const POD = (name: string, node: string, o: { labels?: Record<string, string>; annotations?: Record<string, string>; hostPort?: number; namespace?: string } = {}) => `apiVersion: v1
kind: Pod
metadata:
  name: ${name}
${o.namespace ? `  namespace: ${o.namespace}\n` : ''}  labels: ${JSON.stringify(o.labels ?? { app: name })}
  annotations: ${JSON.stringify(o.annotations ?? {})}
spec:
  nodeName: kc-${node}
${HTTPD('  ', o.hostPort ? `ports: [{containerPort: 80, hostPort: ${o.hostPort}}]` : '')}
`;

/** An HTTP GET from a node's netns (bash's /dev/tcp: no tool needed on the node). */
export const getFromNode = (w: string, ip: string, port: number): string =>
  execFileSync('ip', ['netns', 'exec', `kc-${w}`, 'timeout', '10', 'bash', '-c', `exec 3<>/dev/tcp/${ip}/${port}; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3`], { encoding: 'utf8' });

export const WEB = (replicas: number) => `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: ${replicas}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
${HTTPD('      ')}
`;
export const apply = (yaml: string) => execFileSync(`${BIN}/kubectl`, ['--kubeconfig', KUBECONFIG, 'apply', '-f', '-'], { input: yaml, encoding: 'utf8' });

export const ready = (node: any) => node.status.conditions.find((c: any) => c.type === 'Ready');
export const runningPods = () => kubectlJson('get', 'pods', '-l', 'app=web').items.filter((p: any) => p.status.phase === 'Running' && p.status.podIPs?.length === 2);


/** knictl run inside the kni pod of a node (kni as the DaemonSet). */
export const knictlInPod = (node: string, ...args: string[]): any => {
  const pod = kubectlJson('-n', 'kube-system', 'get', 'pods', '-l', 'app=kni', '--field-selector', `spec.nodeName=${node}`).items[0];
  return JSON.parse(kubectl('-n', 'kube-system', 'exec', pod.metadata.name, '--', 'knictl', ...args, '-o', 'json'));
};
