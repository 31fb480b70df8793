// What the cluster tests share: the cluster script, kubectl, and the web Deployment.
import { execFileSync, spawnSync } from 'node:child_process';
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
export const knictl = (w: string, ...args: string[]): any =>
  JSON.parse(execFileSync(process.execPath, [path.join(packageRoot(), 'dist/plugin/knictl.js'), '--socket', `${CL}/${w}/root/run/kni/kni.sock`, ...args, '-o', 'json'], { encoding: 'utf8' }));
export const kniVeths = (w: string): string[] =>
  execFileSync('ip', ['-n', `kc-${w}`, '-o', 'link', 'show'], { encoding: 'utf8' }).split('\n').map((l) => l.split(':')[1]?.trim().split('@')[0] ?? '').filter((n) => /^kni[0-9a-f]{12}$/.test(n));

export const WEB = (replicas: number) => `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: ${replicas}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      containers:
      - name: httpd
        image: kni.local/e2e:1
        imagePullPolicy: Never
        command: ["/bin/busybox", "httpd", "-f", "-p", "80", "-h", "/www"]
`;
export const apply = (yaml: string) => execFileSync(`${BIN}/kubectl`, ['--kubeconfig', KUBECONFIG, 'apply', '-f', '-'], { input: yaml, encoding: 'utf8' });

export const ready = (node: any) => node.status.conditions.find((c: any) => c.type === 'Ready');
export const runningPods = () => kubectlJson('get', 'pods', '-l', 'app=web').items.filter((p: any) => p.status.phase === 'Running' && p.status.podIPs?.length === 2);


/** knictl run inside the kni pod of a node (kni as the DaemonSet). */
export const knictlInPod = (node: string, ...args: string[]): any => {
  const pod = kubectlJson('-n', 'kube-system', 'get', 'pods', '-l', 'app=kni', '--field-selector', `spec.nodeName=${node}`).items[0];
  return JSON.parse(kubectl('-n', 'kube-system', 'exec', pod.metadata.name, '--', 'node', '/app/dist/plugin/knictl.js', ...args, '-o', 'json'));
};
