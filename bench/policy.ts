// NetworkPolicy as a user sees it, with kni's own policy and then with kube-network-policies
// v0.8.0 beside kni (kni's policy off), in one run on the test cluster (hack/cluster/cluster.sh):
//   - a policy change to its enforcement: a default deny created, then deleted, CHANGES times;
//     the time from the API's answer to the first refused (then accepted) connection of a
//     client pod on the other node, which tries one every 10 ms;
//   - a new pod to its first allowed connection, in a namespace with a default deny and a policy
//     allowing the client (from the API's answer to the create);
//   - connection setup latency (500 connections one after another) and one stream's throughput
//     (512 MiB) through an allowing policy, and with no policy at all;
//   - kni's CPU and RSS on the node with PODS pods elsewhere in the cluster (bound to Nodes kwok
//     keeps, given addresses from their podCIDRs by kwok) and then POLICIES NetworkPolicies
//     whose peers they are, and a change's enforcement then.
//   node dist/bench/policy.js [CHANGES=20] [POLICIES=1000] [PODS=1000]
import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { packageRoot } from '../plugin/server/protos';
import { apply, CL, cluster, clusterUp, knictl, kniWith, kubectl, kubectlJson, POD, KUBECONFIG } from '../test/cluster/cluster-helpers';
import { KWOK_NODE_ANNOTATION, KWOK_TAINT, startKwok } from './kwok';
import { cpuMs, percentile, rssMb } from './stats';

const CHANGES = Math.max(2, Number(process.argv[2] ?? 20));
const POLICIES = Math.max(0, Number(process.argv[3] ?? 1000));
const PODS = Math.max(0, Number(process.argv[4] ?? 1000));
const KWOK_NODES = 10;
const AT_ONCE = 16;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const PROBER = path.join(packageRoot(), 'dist/bench/policy-prober.js');

/** The API clients, made once the cluster (and its kubeconfig) is up. */
let net: k8s.NetworkingV1Api;
let core: k8s.CoreV1Api;
function connect(): void {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(KUBECONFIG);
  net = kc.makeApiClient(k8s.NetworkingV1Api);
  core = kc.makeApiClient(k8s.CoreV1Api);
}

const pod = (name: string, namespace: string, node: string, app: string) => POD(name, node, { namespace, labels: { app } });

const DENY: k8s.V1NetworkPolicy = { metadata: { name: 'deny' }, spec: { podSelector: {}, policyTypes: ['Ingress'] } };
const ALLOW: k8s.V1NetworkPolicy = {
  metadata: { name: 'allow' },
  spec: { podSelector: { matchLabels: { app: 'target' } }, ingress: [{ _from: [{ namespaceSelector: { matchLabels: { role: 'client' } }, podSelector: { matchLabels: { app: 'client' } } }], ports: [{ port: 80 }, { port: 5001 }] }] },
};

/** A command in a pod's netns on a worker. */
function inPod(w: string, ns: string, name: string, cmd: string[]): ChildProcess {
  const sandbox = knictl(w, 'pods').find((p: any) => p.pod.namespace === ns && p.pod.name === name);
  if (!sandbox) throw new Error(`no sandbox of ${ns}/${name} on ${w}`);
  return spawn('nsenter', [`--mount=${CL}/mnt/${w}`, 'nsenter', `--net=${sandbox.netns_path}`, ...cmd], { stdio: ['pipe', 'pipe', 'inherit'] });
}

/** The client's prober: commands in, lines out. */
class Prober {
  private lines: string[] = [];
  private waiters: (() => void)[] = [];
  constructor(private readonly p: ChildProcess) {
    let buf = '';
    p.stdout!.on('data', (b) => {
      buf += b;
      const parts = buf.split('\n');
      buf = parts.pop()!;
      this.lines.push(...parts);
      for (const w of this.waiters.splice(0)) w();
    });
  }
  send(cmd: string): void {
    this.p.stdin!.write(`${cmd}\n`);
  }
  /** The first line (from now on) a test takes, its index kept. */
  async next(take: (l: string) => boolean, timeoutMs = 60_000, from = 0): Promise<{ line: string; at: number }> {
    const deadline = Date.now() + timeoutMs;
    for (let i = from; ; ) {
      for (; i < this.lines.length; i++) if (take(this.lines[i])) return { line: this.lines[i], at: i };
      if (Date.now() > deadline) throw new Error(`prober: nothing matching within ${timeoutMs} ms (last: ${this.lines.slice(-3).join(' | ')})`);
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 200);
      });
    }
  }
  get count(): number {
    return this.lines.length;
  }
  kill(): void {
    this.p.kill('SIGKILL');
  }
}

/** From t0, the start of the first attempt with `ok` that the next two attempts agree with. */
async function flipped(prober: Prober, t0: number, ok: boolean, from: number): Promise<number> {
  let at = from;
  for (;;) {
    const hit = await prober.next((l) => l.startsWith('probe ') && Number(l.split(' ')[1]) >= t0 && l.endsWith(ok ? ' 1' : ' 0'), 60_000, at);
    const a = await prober.next((l) => l.startsWith('probe '), 10_000, hit.at + 1);
    const second = await prober.next((l) => l.startsWith('probe '), 10_000, a.at + 1);
    if (a.line.endsWith(ok ? ' 1' : ' 0') && second.line.endsWith(ok ? ' 1' : ' 0')) return Number(hit.line.split(' ')[1]) - t0;
    at = hit.at + 1;
  }
}

const podIp = async (ns: string, name: string): Promise<string> => {
  for (;;) {
    const p = await core.readNamespacedPod({ namespace: ns, name }).catch(() => undefined);
    if (p?.status?.podIP) return p.status.podIP;
    await sleep(20);
  }
};

const pct = (xs: number[]) => `${percentile(xs, 50).toFixed(0)} / ${percentile(xs, 99).toFixed(0)}`;
const pctMs = (xs: number[]) => `${percentile(xs, 50).toFixed(2)} / ${percentile(xs, 99).toFixed(2)}`;

interface Result {
  enforceMs: number[];
  releaseMs: number[];
  firstConnectMs: number[];
  connectMs: number[];
  connectNoPolicyMs: number[];
  mbPerS: number;
  mbPerSNoPolicy: number;
  agentRssMb: number;
}

/** The pid of a process on worker w1: kni from its pid file, the agent by its name and netns. */
const kniPid = (): number => Number(fs.readFileSync(`${CL}/run/kni-w1.pid`, 'utf8').trim());
function knpPid(): number {
  for (const d of fs.readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      if (!fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').startsWith('/kube-network-policies')) continue;
      if (fs.readlinkSync(`/proc/${d}/ns/net`) === fs.readlinkSync(`/proc/${kniPid()}/ns/net`)) return Number(d);
    } catch {
      // gone meanwhile
    }
  }
  throw new Error('kube-network-policies is not running on kc-w1');
}

async function measure(what: string, agentPid: () => number): Promise<Result> {
  const policies = async (...ps: k8s.V1NetworkPolicy[]) => {
    for (const p of ps) await net.createNamespacedNetworkPolicy({ namespace: 'pol', body: p });
  };
  const drop = async (...names: string[]) => {
    for (const name of names) await net.deleteNamespacedNetworkPolicy({ namespace: 'pol', name }).catch(() => undefined);
  };
  const target = await podIp('pol', 'target');
  const prober = new Prober(inPod('w2', 'default', 'client', [process.execPath, PROBER]));
  const sink = inPod('w1', 'pol', 'target', [process.execPath, PROBER, 'sink', '5001']);
  try {
    await prober.next((l) => l === 'ready');
    const r: Result = { enforceMs: [], releaseMs: [], firstConnectMs: [], connectMs: [], connectNoPolicyMs: [], mbPerS: 0, mbPerSNoPolicy: 0, agentRssMb: rssMb(agentPid()) };
    // Connections and a stream with no policy at all, then through an allowing one.
    const connects = async () => JSON.parse((await prober.next((l) => l.startsWith('connects '), 120_000, prober.count)).line.slice(9)) as number[];
    const stream = async () => (512 / (Number((await prober.next((l) => l.startsWith('sent '), 300_000, prober.count)).line.slice(5)) / 1000));
    prober.send(`connects ${target} 80 500`);
    r.connectNoPolicyMs = await connects();
    prober.send(`send ${target} 5001 ${512 << 20}`);
    r.mbPerSNoPolicy = await stream();
    await policies(DENY, ALLOW);
    await sleep(2000);
    prober.send(`connects ${target} 80 500`);
    r.connectMs = await connects();
    prober.send(`send ${target} 5001 ${512 << 20}`);
    r.mbPerS = await stream();
    // Policy changes: the deny of everything but the client dropped, then added again.
    await drop('allow');
    await sleep(1000);
    const watching = prober.count;
    prober.send(`watch ${target} 80`);
    await drop('deny');
    await prober.next((l) => l.endsWith(' 1'), 30_000, watching);
    for (let i = 0; i < CHANGES / 2; i++) {
      const from = prober.count;
      const t0 = Date.now();
      await policies(DENY);
      r.enforceMs.push(await flipped(prober, t0, false, from));
      const from2 = prober.count;
      const t1 = Date.now();
      await drop('deny');
      r.releaseMs.push(await flipped(prober, t1, true, from2));
    }
    // New pods in a namespace with a default deny and the client allowed: create to first connection.
    await policies(DENY, ALLOW);
    for (let i = 0; i < 5; i++) {
      const name = `fresh-${i}`;
      const t0 = Date.now();
      apply(pod(name, 'pol', 'w1', 'target'));
      const ip = await podIp('pol', name);
      const from = prober.count;
      prober.send(`watch ${ip} 80`);
      const ok = await prober.next((l) => l.startsWith('probe ') && l.endsWith(' 1'), 120_000, from);
      r.firstConnectMs.push(Number(ok.line.split(' ')[1]) - t0);
      kubectl('-n', 'pol', 'delete', 'pod', name, '--wait=false');
    }
    prober.send('stop');
    await drop('deny', 'allow');
    process.stderr.write(`${what}: measured\n`);
    return r;
  } finally {
    prober.kill();
    sink.kill('SIGKILL');
  }
}

/** Runs make(i) for i < n, AT_ONCE at a time. */
async function inParallel(n: number, make: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: AT_ONCE }, async () => {
    while (next < n) await make(next++);
  }));
}

/** PODS pods on KWOK_NODES made-up Nodes kwok keeps (Running, addressed from their podCIDRs): peers for kni's sets, no wiring of kni's. */
async function kwokPods(): Promise<void> {
  for (let i = 0; i < KWOK_NODES; i++) {
    await core.createNode({ body: {
      metadata: { name: `kb-pol-${i}`, labels: { type: 'kwok' }, annotations: KWOK_NODE_ANNOTATION },
      spec: { podCIDR: `10.201.${i}.0/24`, podCIDRs: [`10.201.${i}.0/24`, `fd00:201:${i}::/64`], taints: [KWOK_TAINT] },
      status: { addresses: [{ type: 'InternalIP', address: `172.31.0.${i + 1}` }, { type: 'Hostname', address: `kb-pol-${i}` }] },
    } });
  }
  await inParallel(PODS, (i) => core.createNamespacedPod({ namespace: 'bulk', body: {
    metadata: { name: `peer-${i}`, labels: { app: `peer-${i}` } },
    spec: { nodeName: `kb-pol-${i % KWOK_NODES}`, tolerations: [{ ...KWOK_TAINT, operator: 'Equal' }], containers: [{ name: 'c', image: 'made-up' }] },
  } }));
  for (const deadline = Date.now() + 300_000; ; await sleep(1000)) {
    const addressed = (await core.listNamespacedPod({ namespace: 'bulk' })).items.filter((p) => p.status?.podIP).length;
    if (addressed >= PODS) return;
    if (Date.now() > deadline) throw new Error(`kwok addressed ${addressed} of ${PODS} pods in 300 s`);
  }
}

/** kni's CPU and RSS on kc-w1 with PODS pods and POLICIES policies (none selecting a pod of its node), and a change's enforcement then. */
async function atScale(): Promise<{ rssBefore: number; rssPods: number; rssAfter: number; podsS: number; podsCpuS: number; cpuS: number; createS: number; enforceMs: number[] }> {
  kubectl('create', 'namespace', 'bulk');
  const pid = kniPid();
  const kwok = startKwok(['node/fast/node-initialize.yaml', 'node/heartbeat-with-lease/node-heartbeat-with-lease.yaml', 'pod/fast/pod-ready.yaml', 'pod/fast/pod-delete.yaml'], 40);
  try {
    const rssBefore = rssMb(pid);
    const c0 = cpuMs(pid);
    const t00 = Date.now();
    if (PODS) await kwokPods();
    const podsS = (Date.now() - t00) / 1000;
    await sleep(5000);
    const cp = cpuMs(pid);
    const rssPods = rssMb(pid);
    const t0 = Date.now();
    await inParallel(POLICIES, (i) => net.createNamespacedNetworkPolicy({ namespace: 'bulk', body: { metadata: { name: `p${i}` }, spec: { podSelector: { matchLabels: { app: `bulk-${i}` } }, ingress: [{ _from: [{ podSelector: { matchLabels: { app: `peer-${i}` } } }], ports: [{ port: 80 + (i % 1000) }] }] } } }));
    const createS = (Date.now() - t0) / 1000;
    await sleep(5000);
    const c1 = cpuMs(pid);
    const rssAfter = rssMb(pid);
    const enforceMs = await enforcedWithAll();
    return { rssBefore, rssPods, rssAfter, podsS, podsCpuS: (cp.user + cp.system - c0.user - c0.system) / 1000, cpuS: (c1.user + c1.system - cp.user - cp.system) / 1000, createS, enforceMs };
  } finally {
    kubectl('delete', 'namespace', 'bulk', '--wait=false');
    kubectl('delete', 'node', '-l', 'type=kwok', '--wait=false');
    kwok.kill();
  }
}

/** A deny on the target created and deleted 5 times with everything of atScale present: ms to each enforcement. */
async function enforcedWithAll(): Promise<number[]> {
  const target = await podIp('pol', 'target');
  const prober = new Prober(inPod('w2', 'default', 'client', [process.execPath, PROBER]));
  const enforceMs: number[] = [];
  try {
    await prober.next((l) => l === 'ready');
    prober.send(`watch ${target} 80`);
    await prober.next((l) => l.endsWith(' 1'), 30_000);
    for (let i = 0; i < 5; i++) {
      const from = prober.count;
      const t = Date.now();
      await net.createNamespacedNetworkPolicy({ namespace: 'pol', body: DENY });
      enforceMs.push(await flipped(prober, t, false, from));
      const from2 = prober.count;
      await net.deleteNamespacedNetworkPolicy({ namespace: 'pol', name: 'deny' });
      await flipped(prober, Date.now(), true, from2);
    }
  } finally {
    prober.kill();
  }
  return enforceMs;
}

async function main(): Promise<void> {
  try {
    cluster('down');
    clusterUp({});
    connect();
    cluster('kni');
    kubectl('label', 'namespace', 'default', 'role=client');
    kubectl('create', 'namespace', 'pol');
    apply(pod('client', 'default', 'w2', 'client'));
    apply(pod('target', 'pol', 'w1', 'target'));
    kubectl('wait', '--for=condition=Ready', 'pod/client', '--timeout=120s');
    kubectl('-n', 'pol', 'wait', '--for=condition=Ready', 'pod/target', '--timeout=120s');
    const kni = await measure("kni's policy", kniPid);
    const scale = POLICIES ? await atScale() : undefined;
    // kni with its policy off (its table gone), kube-network-policies beside it.
    cluster('kni-stop w1');
    cluster('kni-stop w2');
    kniWith('policy: { enabled: false }\n');
    cluster('kube-network-policies');
    await sleep(3000);
    // It judges connections in user space through nftables' queue expression: a kernel without
    // it (nft_queue) leaves it unable to write its rules, and it enforces nothing.
    const knpLog = kubectl('-n', 'kube-system', 'logs', '-l', 'app=kube-network-policies', '--tail=200');
    const knpBroken = /syncing nftables rules" error=/.test(knpLog) ? `kube-network-policies cannot write its nftables rules on this kernel (${/error=<?\s*([^\n]+)/.exec(knpLog)?.[1]?.trim() ?? 'see its log'}; it needs the nft queue expression, nft_queue), so it enforces nothing here` : '';
    const knp = knpBroken ? undefined : await measure('kube-network-policies', knpPid);
    const row = (name: string, f: (r: Result) => string) => `| ${name} | ${f(kni)} | ${knp ? f(knp) : '-'} |`;
    const ratio = (a: number, b: number) => (b ? (a / b).toFixed(2) : '-');
    const lines = [
      `NetworkPolicy: kni's own vs kube-network-policies v0.8.0 beside kni (its policy off), one run, ${CHANGES / 2} changes each way`,
      ...(knpBroken ? [`(${knpBroken})`] : []),
      '',
      "| | kni's policy | kube-network-policies |",
      '|---|---|---|',
      row('deny created → enforced, p50 / p99 ms', (r) => pct(r.enforceMs)),
      row('deny deleted → connections again, p50 / p99 ms', (r) => pct(r.releaseMs)),
      row('new pod → first allowed connection, p50 / p99 ms', (r) => pct(r.firstConnectMs)),
      row('connection setup, no policy, p50 / p99 ms', (r) => pctMs(r.connectNoPolicyMs)),
      row('connection setup through an allowing policy, p50 / p99 ms', (r) => pctMs(r.connectMs)),
      row('  ratio to no policy (p50)', (r) => ratio(percentile(r.connectMs, 50), percentile(r.connectNoPolicyMs, 50))),
      row('one stream, no policy / through a policy, MB/s', (r) => `${r.mbPerSNoPolicy.toFixed(0)} / ${r.mbPerS.toFixed(0)}`),
      row('RSS of the enforcing process, MB (kni: the whole node agent)', (r) => r.agentRssMb.toFixed(0)),
      ...(knp ? ['', `enforcement, kni vs kube-network-policies (p50): ${ratio(percentile(kni.enforceMs, 50), percentile(knp.enforceMs, 50))}`] : []),
      ...(scale ? [
        '',
        `kni with ${PODS} pods elsewhere (kwok's, on ${KWOK_NODES} Nodes; created and addressed in ${scale.podsS.toFixed(0)} s): RSS ${scale.rssBefore.toFixed(0)} → ${scale.rssPods.toFixed(0)} MB, CPU ${scale.podsCpuS.toFixed(1)} s while they came`,
        `then ${POLICIES} NetworkPolicies, each with one of those pods as its peer (created in ${scale.createS.toFixed(0)} s): RSS → ${scale.rssAfter.toFixed(0)} MB, CPU ${scale.cpuS.toFixed(1)} s while they came, a deny then enforced in ${pct(scale.enforceMs)} ms (p50 / p99)`,
      ] : []),
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    cluster('down');
  }
}

void main().catch((e) => {
  process.stderr.write(`${(e as Error).stack}\n`);
  process.exitCode = 1;
});
