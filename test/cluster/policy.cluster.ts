// Network policy enforced by kni in a real cluster (plugin/policy/, plugin/kube/policy-watch.ts):
// a new pod in a default-deny namespace receives nothing while another pod floods its address,
// from before the pod exists until after it is Ready; a policy change takes effect within a
// second; kill -9 of kni keeps the table in the kernel, and its restart opens no window; a
// ClusterNetworkPolicy is enforced, and kni does without its CRD until it is installed; a
// MultiNetworkPolicy is enforced on a secondary network; policy.enabled: false takes the table
// away. The upstream NetworkPolicy specs run in
// k8s-e2e.cluster.ts.
import assert from 'node:assert/strict';
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import { criClient } from '../helpers/containerd-env';
import { trySh } from '../helpers/sh';
import { waitFor } from '../helpers/wait';
import { apply, CL, cluster, clusterUp, knictl, kniWith, kubectl, kubectlJson, POD } from './cluster-helpers';

/** Sends UDP to port 9 of every address of a /24 and of the first 254 of a /64, round after round, until killed. */
const FLOOD = `
const dgram = require('dgram');
const [v4, v6] = process.argv.slice(1);
const s4 = dgram.createSocket('udp4'), s6 = dgram.createSocket('udp6');
s4.on('error', () => {}); s6.on('error', () => {});
const b = Buffer.from('x');
let rounds = 0;
setInterval(() => {
  for (let i = 2; i < 255; i++) { s4.send(b, 9, v4 + i); s6.send(b, 9, v6 + i.toString(16)); }
  if (++rounds === 1) console.log('flooding');
}, 5);
`;

const pod = (name: string, namespace: string, node: string) => POD(name, node, { namespace, labels: { app: name } });

const DENY = (namespace: string) => `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: deny, namespace: ${namespace} }
spec: { podSelector: {}, policyTypes: [Ingress] }
`;

/** A command in a pod's netns on a worker (the worker's own mount namespace holds containerd's netns paths). */
const inPod = (w: string, ns: string, name: string, cmd: string[]): string[] => {
  const sandbox = knictl(w, 'pods').find((p: any) => p.pod.namespace === ns && p.pod.name === name);
  assert.ok(sandbox, `kni on ${w} has no sandbox of ${ns}/${name}`);
  return ['nsenter', `--mount=${CL}/mnt/${w}`, 'nsenter', `--net=${sandbox.netns_path}`, ...cmd];
};

/** UDP datagrams that reached a pod's netns, IPv4 and IPv6 (to a port with a socket or not). */
function udpArrived(w: string, ns: string, name: string): number {
  const [cmd, ...args] = inPod(w, ns, name, ['cat', '/proc/net/snmp', '/proc/net/snmp6']);
  const r = trySh(cmd, args);
  assert.ok(r.ok, r.out);
  const udp = r.out.split('\n').filter((l) => l.startsWith('Udp:'));
  const v4 = Object.fromEntries(udp[0].split(/\s+/).slice(1).map((k, i) => [k, Number(udp[1].split(/\s+/)[i + 1])]));
  const v6 = (k: string) => Number(new RegExp(`^${k}\\s+(\\d+)`, 'm').exec(r.out)?.[1] ?? 0);
  return v4.InDatagrams + v4.NoPorts + v6('Udp6InDatagrams') + v6('Udp6NoPorts');
}

/** Whether a TCP connection from a pod to an address's port 80 is made within 2 s. */
const connects = (w: string, ns: string, name: string, ip: string): boolean => {
  const [cmd, ...args] = inPod(w, ns, name, ['timeout', '2', 'bash', '-c', `exec 3<>/dev/tcp/${ip}/80`]);
  return trySh(cmd, args).ok;
};

/** How long after t0 the first attempt that finds cond true began (connection attempts take up to 2 s each). */
async function startedAfter(t0: number, cond: () => boolean, what: string): Promise<number> {
  for (const deadline = Date.now() + 30_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
    const start = Date.now();
    if (cond()) return start - t0;
  }
  throw new Error(`${what} within 30 s`);
}

const podIp = (ns: string, name: string): string => kubectlJson('-n', ns, 'get', 'pod', name).status.podIP;
const policyTable = (w: string) => trySh('ip', ['netns', 'exec', `kc-${w}`, 'nft', 'list', 'table', 'inet', 'kni-policy']);

describe('cluster: network policy enforced by kni', function () {
  this.timeout(600_000);
  let flood: ChildProcess | undefined;

  before(() => {
    cluster('down');
    clusterUp({});
    cluster('kni');
    kubectl('create', 'namespace', 'pol-open');
    kubectl('create', 'namespace', 'pol-deny');
    apply(DENY('pol-deny'));
    apply(pod('sender', 'default', 'w2'));
    kubectl('wait', '--for=condition=Ready', 'pod/sender', '--timeout=120s');
  });
  after(() => {
    flood?.kill('SIGKILL');
    cluster('down');
  });

  it('a new pod in a default-deny namespace receives nothing while a pod floods its address from before it exists until after it is Ready', async () => {
    const [v4, v6] = kubectlJson('get', 'node', 'kc-w1').spec.podCIDRs as string[];
    const [cmd, ...args] = inPod('w2', 'default', 'sender', [process.execPath, '-e', FLOOD, v4.replace(/0\/24$/, ''), v6.replace(/\/64$/, '')]);
    flood = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    flood.stdout!.on('data', (b) => (out += b));
    await waitFor(() => out.includes('flooding'), 30_000, () => `the flood did not start: ${out}`);
    apply(pod('open', 'pol-open', 'w1'));
    apply(pod('closed', 'pol-deny', 'w1'));
    kubectl('-n', 'pol-open', 'wait', '--for=condition=Ready', 'pod/open', '--timeout=120s');
    kubectl('-n', 'pol-deny', 'wait', '--for=condition=Ready', 'pod/closed', '--timeout=120s');
    await new Promise((r) => setTimeout(r, 3000));
    flood.kill('SIGKILL');
    flood = undefined;
    const open = udpArrived('w1', 'pol-open', 'open');
    const closed = udpArrived('w1', 'pol-deny', 'closed');
    process.stdout.write(`      datagrams arrived: ${open} at the pod with no policy, ${closed} at the default-deny pod\n`);
    assert.ok(open > 0, 'the flood reached no pod: it proves nothing');
    assert.equal(closed, 0, 'the default-deny pod received datagrams its policy forbids');
    assert.match(policyTable('w1').out, /counter packets [1-9]\d* bytes \d+ drop comment "pol-deny\/closed: ingress isolated/);
  });

  it('a policy allowing the sender takes effect within a second, and its deletion too', async () => {
    const ip = podIp('pol-deny', 'closed');
    assert.equal(connects('w2', 'default', 'sender', ip), false, 'the default-deny pod took a connection');
    kubectl('label', 'namespace', 'default', 'role=sender', '--overwrite');
    let t0 = Date.now();
    apply(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: from-sender, namespace: pol-deny }
spec:
  podSelector: { matchLabels: { app: closed } }
  ingress: [{ from: [{ namespaceSelector: { matchLabels: { role: sender } }, podSelector: { matchLabels: { app: sender } } }], ports: [{ port: 80 }] }]
`);
    const allowMs = await startedAfter(t0, () => connects('w2', 'default', 'sender', ip), 'the allowing policy was not enforced');
    const shown = knictl('w1', 'policy', 'pol-deny/closed');
    assert.equal(shown.enforced, true, JSON.stringify(shown));
    assert.deepEqual(shown.policies.map((p: any) => [p.direction, p.name, p.allows]), [
      ['ingress', 'pol-deny/deny', []],
      ['ingress', 'pol-deny/from-sender', ['from pods app=sender in namespaces role=sender on 80/TCP']],
    ], JSON.stringify(shown));
    t0 = Date.now();
    kubectl('-n', 'pol-deny', 'delete', 'networkpolicy', 'from-sender');
    const denyMs = await startedAfter(t0, () => !connects('w2', 'default', 'sender', ip), 'the deleted policy still allows');
    process.stdout.write(`      a connection allowed ${allowMs} ms after the policy was created, refused ${denyMs} ms after it was deleted (from kubectl's return)\n`);
    // The target is 1 s; a busy CI machine is given more.
    assert.ok(allowMs < 10_000 && denyMs < 10_000, `allowed after ${allowMs} ms, denied after ${denyMs} ms`);
  });

  it('kill -9 of kni keeps the table in the kernel; its restart opens no window, and new pods are isolated again', async () => {
    const ip = podIp('pol-deny', 'closed');
    cluster('kni-stop w1');
    assert.match(policyTable('w1').out, /pol-deny\/closed: ingress isolated/, 'the table went with kni');
    assert.equal(connects('w2', 'default', 'sender', ip), false, 'kni down, the default-deny pod took a connection');
    cluster('kni-restart w1');
    const until = Date.now() + 5000;
    while (Date.now() < until) assert.equal(connects('w2', 'default', 'sender', ip), false, 'while kni restarted, the default-deny pod took a connection');
    apply(pod('later', 'pol-deny', 'w1'));
    kubectl('-n', 'pol-deny', 'wait', '--for=condition=Ready', 'pod/later', '--timeout=120s');
    assert.equal(connects('w2', 'default', 'sender', podIp('pol-deny', 'later')), false, 'a pod started after the restart took a connection');
    assert.equal(connects('w2', 'default', 'sender', podIp('pol-open', 'open')), true, 'the pod with no policy takes no connection');
  });

  it('a ClusterNetworkPolicy: an Admin tier Deny over what no NetworkPolicy isolates, within a second, shown by knictl policy; without its CRD kni enforces NetworkPolicies and reads them when it is back', async () => {
    const ip = podIp('pol-open', 'open');
    const sender = () => connects('w2', 'default', 'sender', ip);
    assert.equal(sender(), true, 'the pod with no policy takes no connection');
    const CNP = `apiVersion: policy.networking.k8s.io/v1beta1
kind: ClusterNetworkPolicy
metadata: { name: deny-sender }
spec:
  tier: Admin
  priority: 10
  subject: { namespaces: { matchLabels: { kubernetes.io/metadata.name: pol-open } } }
  ingress: [{ name: no-sender, action: Deny, from: [{ pods: { namespaceSelector: {}, podSelector: { matchLabels: { app: sender } } } }] }]
`;
    const t0 = Date.now();
    apply(CNP);
    const denyMs = await startedAfter(t0, () => !sender(), 'the ClusterNetworkPolicy was not enforced');
    process.stdout.write(`      a ClusterNetworkPolicy's Deny enforced ${denyMs} ms after it was created\n`);
    assert.ok(denyMs < 10_000, `denied after ${denyMs} ms`);
    const shown = knictl('w1', 'policy', 'pol-open/open');
    assert.deepEqual(shown.policies.map((p: any) => [p.direction, p.name, p.allows]), [['ingress', 'deny-sender', ['Deny (no-sender): from pods app=sender in every namespace on every port']]], JSON.stringify(shown));

    // The CRD deleted (its objects with it), kni restarted: it starts, and NetworkPolicies hold.
    kubectl('delete', 'crd', 'clusternetworkpolicies.policy.networking.k8s.io', '--wait=true');
    cluster('kni-stop w1');
    cluster('kni-restart w1');
    await waitFor(() => sender(), 60_000, () => 'the deleted ClusterNetworkPolicy still denies');
    assert.equal(connects('w2', 'default', 'sender', podIp('pol-deny', 'closed')), false, 'without the CRD the NetworkPolicies are not enforced');
    assert.match(fs.readFileSync(`${CL}/run/kni-w1.log`, 'utf8'), /ClusterNetworkPolicies are not served/);
    // The CRD back: kni's watch finds it, and a new policy is enforced.
    cluster('cnp-crd');
    apply(CNP);
    await waitFor(() => !sender(), 90_000, () => 'the ClusterNetworkPolicy made after its CRD came back is not enforced');
    kubectl('delete', 'clusternetworkpolicy', 'deny-sender');
    await waitFor(() => sender(), 30_000, () => 'the deleted ClusterNetworkPolicy still denies');
  });

  it('a MultiNetworkPolicy on a secondary network (macvlan): in the pod before its first packet, its peers by their addresses there; the default network untouched; a change within a second', async () => {
    apply(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: { name: mnp-net, namespace: pol-open }
spec:
  config: '{"cniVersion": "1.0.0", "name": "mnp-net", "type": "macvlan", "master": "sec0", "mode": "bridge", "capabilities": {"ips": true}, "ipam": {"type": "static"}}'
`);
    const MNP = (peer: string) => `apiVersion: k8s.cni.cncf.io/v1beta1
kind: MultiNetworkPolicy
metadata: { name: mnp-server, namespace: pol-open, annotations: { k8s.v1.cni.cncf.io/policy-for: mnp-net } }
spec:
  podSelector: { matchLabels: { app: mnp-server } }
  policyTypes: [Ingress]
  ingress: [{ from: [{ podSelector: { matchLabels: { app: ${peer} } } }] }]
`;
    // The policy first: the server's table is written inside its attach.
    apply(MNP('mnp-client'));
    const onNet = (name: string, node: string, ip: string) => POD(name, node, { namespace: 'pol-open', labels: { app: name }, annotations: { 'k8s.v1.cni.cncf.io/networks': JSON.stringify([{ name: 'mnp-net', ips: [`${ip}/24`] }]) } });
    apply([onNet('mnp-server', 'w1', '10.250.0.71'), onNet('mnp-client', 'w2', '10.250.0.72'), onNet('mnp-other', 'w2', '10.250.0.73')].join('---\n'));
    for (const n of ['mnp-server', 'mnp-client', 'mnp-other']) kubectl('-n', 'pol-open', 'wait', '--for=condition=Ready', `pod/${n}`, '--timeout=120s');
    const from = (name: string, ip: string) => connects('w2', 'pol-open', name, ip);
    // The client's address on the network reaches the server once the client's network-status is read.
    await waitFor(() => from('mnp-client', '10.250.0.71'), 30_000, () => 'the allowed peer does not reach the server on the secondary network');
    assert.equal(from('mnp-other', '10.250.0.71'), false, 'a peer the MultiNetworkPolicy does not allow reaches the server on its network');
    assert.equal(from('mnp-other', podIp('pol-open', 'mnp-server')), true, 'the MultiNetworkPolicy judged the default network too');
    const server = knictl('w1', 'pods').find((p: any) => p.pod.name === 'mnp-server');
    const table = trySh('nsenter', [`--mount=${CL}/mnt/w1`, 'nsenter', `--net=${server.netns_path}`, 'nft', 'list', 'table', 'inet', 'kni-multi-policy']);
    assert.match(table.out, /iifname "net1" jump in-0/, table.out);
    const shown = knictl('w1', 'policy', 'pol-open/mnp-server');
    assert.deepEqual(shown.policies.map((p: any) => [p.direction, p.name, p.allows]), [['ingress', 'pol-open/mnp-server (MultiNetworkPolicy for pol-open/mnp-net, on net1)', ['from pods app=mnp-client in namespace pol-open on every port']]], JSON.stringify(shown));
    // The other pod allowed instead: within a second.
    const t0 = Date.now();
    apply(MNP('mnp-other'));
    const allowMs = await startedAfter(t0, () => from('mnp-other', '10.250.0.71'), 'the changed MultiNetworkPolicy was not enforced');
    process.stdout.write(`      a MultiNetworkPolicy change enforced ${allowMs} ms after it was applied\n`);
    assert.ok(allowMs < 10_000, `allowed after ${allowMs} ms`);
    assert.equal(from('mnp-client', '10.250.0.71'), false, 'the peer no longer allowed still reaches the server');
    kubectl('-n', 'pol-open', 'delete', 'multi-networkpolicy', 'mnp-server');
    await waitFor(() => from('mnp-client', '10.250.0.71'), 30_000, () => 'the deleted MultiNetworkPolicy still denies');
    // One kni cannot read: said in an Event on it and counted in the metric, enforced nowhere.
    apply(`apiVersion: k8s.cni.cncf.io/v1beta1
kind: MultiNetworkPolicy
metadata: { name: mnp-bad, namespace: pol-open, annotations: { k8s.v1.cni.cncf.io/policy-for: mnp-net } }
spec: { podSelector: {}, ingress: [{ ports: [{ port: [80] }] }] }
`);
    const events = () => kubectlJson('-n', 'pol-open', 'get', 'events', '--field-selector', 'involvedObject.name=mnp-bad').items.map((e: any) => `${e.involvedObject.kind} ${e.reason}: ${e.message}`).join('\n');
    await waitFor(() => /MultiNetworkPolicy PolicyNotEnforced: spec.ingress\[0\].ports\[0\].port is not a number or a name/.test(events()), 30_000, () => events());
    const metrics = execFileSync('ip', ['netns', 'exec', 'kc-w1', 'curl', '-s', '-m', '5', 'http://127.0.0.1:9273/metrics'], { encoding: 'utf8' });
    assert.match(metrics, /kni_policy_problems\{kind="MultiNetworkPolicy"\} 1\n/);
    assert.equal(from('mnp-other', '10.250.0.71'), true, 'the policy kni cannot read isolates the pod');
    kubectl('-n', 'pol-open', 'delete', 'multi-networkpolicy', 'mnp-bad');
    kubectl('-n', 'pol-open', 'delete', 'pod', 'mnp-server', 'mnp-client', 'mnp-other', '--wait=false');
  });

  it("a sandbox whose Pod kni has not seen is read from the API server only where a policy could select it by its labels", async () => {
    const cri = criClient(`${CL}/w1/root/run/containerd/containerd.sock`);
    const stamp = Date.now().toString(36);
    /** kni's reads of the Pod `name` in the API server's audit log. */
    const reads = (name: string) => fs.readFileSync(`${CL}/audit.log`, 'utf8').split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
      .filter((e) => e.user?.username === 'system:serviceaccount:kube-system:kni' && e.verb === 'get' && e.objectRef?.resource === 'pods' && e.objectRef?.name === name).length;
    const run = (name: string, namespace: string) => cri.RunPodSandbox({ config: { metadata: { name, namespace, uid: name, attempt: 0 }, linux: {} } });
    const open = `kni-pr-open-${stamp}`;
    const closed = `kni-pr-closed-${stamp}`;
    try {
      // No policy in its namespace, no ClusterNetworkPolicy: it starts without a read.
      const { pod_sandbox_id: id } = await run(open, 'pol-open');
      await cri.StopPodSandbox({ pod_sandbox_id: id });
      await cri.RemovePodSandbox({ pod_sandbox_id: id });
      // A NetworkPolicy in its namespace: read first, and (no such Pod) refused.
      await assert.rejects(run(closed, 'pol-deny'), /cannot be read for its NetworkPolicies/);
      await waitFor(() => reads(closed) > 0, 30_000, () => `no read of ${closed} in the audit log`);
      assert.equal(reads(open), 0, `kni read ${open}, which no policy could select`);
    } finally {
      const { items } = await cri.ListPodSandbox({});
      for (const sb of items.filter((x: any) => [open, closed].includes(x.metadata.name))) {
        await cri.StopPodSandbox({ pod_sandbox_id: sb.id }).catch(() => undefined);
        await cri.RemovePodSandbox({ pod_sandbox_id: sb.id }).catch(() => undefined);
      }
      cri.close();
    }
  });

  it('policy.enabled: false takes the table away at the next start (a cluster running its own policy agent)', async () => {
    cluster('kni-stop w1');
    cluster('kni-stop w2');
    kniWith('policy: { enabled: false }\n');
    await waitFor(() => !policyTable('w1').ok && !policyTable('w2').ok, 60_000, () => policyTable('w1').out);
    assert.equal(connects('w2', 'default', 'sender', podIp('pol-deny', 'closed')), true, 'without kni\'s policy the pod is still closed');
  });
});
