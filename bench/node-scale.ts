// kni as one node agent of a large cluster: a real kube-apiserver + etcd (hack/cluster/cluster.sh),
// made-up Nodes kept Ready by kwok (their leases renewed, their status refreshed, as kubelets
// do), dual-stack podCIDRs, InternalIPs nobody answers on (every peer over vxlan, every probe
// silent), and ONE kni (kc-w1's, with the DaemonSet's ServiceAccount and ConfigMap; kc-w2's is
// stopped). The Nodes join in bulk up to each size, then all leave. Per step it prints:
// - kni's longest event-loop stall (prom-client's perf_hooks.monitorEventLoopDelay, read
//   every second: its histogram starts again at each scrape), during the step and in the
//   quiet minute after it (the periodic checks, the heartbeats); and of its turns over 20 ms
//   (test/helpers/turn-probe.ts, loaded into kni), the most its main thread was on a CPU in one (kni's
//   work and garbage collection) and the most it waited for one (the machine's load), and the
//   longest one's time in garbage-collection pauses (wall time, waits within them included);
// - a Node → its routes (IPv4 and IPv6) in kc-w1's kernel, from the create call to
//   `ip monitor`'s line, p50 / p99 (in a bulk join this includes the API server's own queue);
//   and a single Node added once the step is done;
// - RunPodSandbox through kc-w1's containerd (kni wires it) while the Nodes join, against the
//   same when quiet; and, one after the other with it, through kc-w2's containerd on a no-op
//   CNI plugin (no kni there): what the machine's load alone does to a sandbox meanwhile;
// - kni's RSS and CPU seconds; its API requests by verb and resource (the API server's audit
//   log: every request of kni's ServiceAccount); the rules of each of kni's iptables chains, and
//   its masquerade table's rules and set elements.
// The API server, etcd, kwok and this bench run on CPU 1 (taskset), kni where it likes.
//   node dist/bench/node-scale.js [SIZES=100,1000,5000] [--lease-seconds 40]
import * as k8s from '@kubernetes/client-node';
import { ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import readline from 'node:readline';
import { BIN, CL, cluster, KUBECONFIG } from '../test/cluster/cluster-helpers';
import { parseCidr } from '../plugin/ipam/ip';
import { criClient } from '../test/helpers/containerd-env';
import { LongTurn, longTurns, withTurnProbe } from '../test/helpers/turn-probe';
import { masqueradeTable } from '../test/helpers/masquerade-table';
import { KWOK_NODE_ANNOTATION, KWOK_TAINT, startKwok } from './kwok';
import { copyNoopCni, writeNoopConflist } from './noop-network';
import { cpuMs, percentile, rssMb } from './stats';

const args = process.argv.slice(2);
const option = (name: string, fallback: number): number => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const SIZES = (args.find((a) => /^\d+(,\d+)*$/.test(a)) ?? '100,1000,5000').split(',').map(Number);
// A kubelet's default (nodeLeaseDurationSeconds): kwok renews each lease every quarter of it.
const LEASE_SECONDS = option('--lease-seconds', 40);
const CREATES_AT_ONCE = 16;
const QUIET_MS = 60_000;
const LABEL = 'kni.bench/scale';
const KWOK_STAGES = ['node/fast/node-initialize.yaml', 'node/heartbeat-with-lease/node-heartbeat-with-lease.yaml'];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const kniPid = (): number => Number(fs.readFileSync(`${CL}/run/kni-w1.pid`, 'utf8').trim());

/** The i-th made-up Node: a /24 and a /64 of its own, addresses kni's vxlan reaches nobody at. */
const v4Cidr = (i: number) => `10.${100 + (i >> 8)}.${i & 255}.0/24`;
const v6Cidr = (i: number) => parseCidr(`fd00:20:${i.toString(16)}::/64`).text; // as the kernel prints it
const madeUpNode = (i: number): k8s.V1Node => ({
  metadata: { name: `kb-scale-${i}`, labels: { [LABEL]: '1', type: 'kwok' }, annotations: KWOK_NODE_ANNOTATION },
  spec: { podCIDR: v4Cidr(i), podCIDRs: [v4Cidr(i), v6Cidr(i)], taints: [KWOK_TAINT] },
  // A Hostname too, as a kubelet reports: kwok's node-initialize stage writes the addresses anew
  // (without the InternalIPs) when either kind is missing.
  status: { addresses: [{ type: 'InternalIP', address: `172.30.${i >> 8}.${i & 255}` }, { type: 'InternalIP', address: `fd00:172:30::${i.toString(16)}` }, { type: 'Hostname', address: `kb-scale-${i}` }] },
});

/** When each route of kc-w1's kernel last came and went, as `ip monitor` says it. */
class RouteWatch {
  readonly added = new Map<string, number>();
  readonly deleted = new Map<string, number>();
  private proc: ChildProcess;
  constructor() {
    this.proc = spawn('ip', ['-n', 'kc-w1', 'monitor', 'route'], { stdio: ['ignore', 'pipe', 'inherit'] });
    readline.createInterface({ input: this.proc.stdout! }).on('line', (line) => {
      const now = Date.now();
      const m = /^(Deleted )?(\S+)/.exec(line);
      if (!m) return;
      (m[1] ? this.deleted : this.added).set(m[2], now);
    });
  }
  stop(): void {
    this.proc.kill();
  }
}

/** `ip` arguments that read kc-w1's kni's metrics. */
const KNI_METRICS = ['netns', 'exec', 'kc-w1', 'curl', '-s', '-m', '5', 'http://127.0.0.1:9273/metrics'];

/** Where the turn probe (test/helpers/turn-probe.ts), loaded into kni, writes its long turns. */
const TURNS_FILE = `/tmp/kni-scale-turns-${process.pid}.log`;

/**
 * kni's longest event-loop stall since the last call (its metric, polled every second); and of
 * its turns of 20 ms or more (turn-probe.ts), the most time its main thread spent on a CPU in
 * one, and the most it waited, runnable, for one in one.
 */
class StallWatch {
  private max = 0;
  private since = Date.now();
  private timer: NodeJS.Timeout;
  constructor() {
    this.read();
    this.timer = setInterval(() => this.read(), 1000);
  }
  private reading: Promise<void> = Promise.resolve();
  // Not waited on by the bench's own loop: its timestamps of the kernel's route lines stay true.
  private read(): Promise<void> {
    this.reading = new Promise((resolve) =>
      execFile('ip', KNI_METRICS, { encoding: 'utf8' }, (e, text) => {
        const m = e ? null : /^kni_nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(text);
        if (m) this.max = Math.max(this.max, Number(m[1]) * 1000);
        resolve();
      }),
    );
    return this.reading;
  }
  async take(): Promise<Stall> {
    await this.reading;
    await this.read();
    const until = Date.now();
    const turns = longTurns(TURNS_FILE).filter((t) => t.at >= this.since && t.at < until);
    const longest = turns.reduce((a: LongTurn | undefined, t) => (a && a.late >= t.late ? a : t), undefined);
    const out = { stall: this.max, cpu: Math.max(0, ...turns.map((t) => t.cpu)), wait: Math.max(0, ...turns.map((t) => t.wait)), gc: longest?.gc ?? NaN };
    this.max = 0;
    this.since = until;
    return out;
  }
  stop(): void {
    clearInterval(this.timer);
  }
}

/** kni's attaches so far, by its own metric (kni_attach_duration_seconds, every entry point): seconds and count. */
function kniAttaches(): { sum: number; count: number } {
  const text = execFileSync('ip', KNI_METRICS, { encoding: 'utf8' });
  let sum = 0;
  let count = 0;
  for (const l of text.split('\n')) {
    if (l.startsWith('kni_attach_duration_seconds_sum')) sum += Number(l.split(' ').pop());
    if (l.startsWith('kni_attach_duration_seconds_count')) count += Number(l.split(' ').pop());
  }
  return { sum, count };
}

/** The mean of kni's own attach time between two readings, ms. */
const attachMean = (a: { sum: number; count: number }, b: { sum: number; count: number }): number => (b.count > a.count ? ((b.sum - a.sum) / (b.count - a.count)) * 1000 : NaN);

/** kni's requests in the audit log from byte `from` on, by verb and resource. */
function kniRequests(from: number): { counts: Record<string, number>; end: number } {
  const file = `${CL}/audit.log`;
  const text = fs.readFileSync(file, 'utf8');
  const counts: Record<string, number> = {};
  for (const line of text.slice(from).split('\n')) {
    if (!line.startsWith('{')) continue;
    const e = JSON.parse(line);
    if (e.user?.username !== 'system:serviceaccount:kube-system:kni') continue;
    // kni's updates of the Pods of sandboxes this bench makes through CRI (no such Pods: 404s).
    if (e.objectRef?.resource === 'pods' && e.objectRef?.name?.startsWith('kb-scale-')) continue;
    const what = `${e.verb} ${e.objectRef?.resource ?? e.requestURI}${e.objectRef?.subresource ? `/${e.objectRef.subresource}` : ''}`;
    counts[what] = (counts[what] ?? 0) + 1;
  }
  return { counts, end: text.length };
}

/** The rules in each of kni's iptables chains (IPv4 and IPv6), and its masquerade table's rules and set elements. */
function kniChains(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [tool, f] of [['iptables-save', 'IPv4'], ['ip6tables-save', 'IPv6']]) {
    for (const l of execFileSync('ip', ['netns', 'exec', 'kc-w1', tool], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).split('\n')) {
      const m = /^-A (KNI-\S+)/.exec(l);
      if (m) out[`${f} chain ${m[1]}`] = (out[`${f} chain ${m[1]}`] ?? 0) + 1;
    }
  }
  const masq = masqueradeTable('kc-w1');
  if (masq) {
    out['masquerade rules (nft)'] = masq.rules.length;
    for (const [name, elements] of Object.entries(masq.sets)) out[`masquerade set ${name} elements`] = elements.length;
  }
  return out;
}

/** Every thread of a process on one CPU. */
const pin = (pid: number, cpu: number) => execFileSync('taskset', ['-a', '-cp', String(cpu), String(pid)], { stdio: 'ignore' });

/**
 * A sandbox stopped and removed. containerd 2.x now and then answers a stop with "ttrpc: closed"
 * (the shim went as it killed the pause container): tried again, as a kubelet does.
 */
async function removeSandbox(cri: ReturnType<typeof criClient>, id: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await cri.StopPodSandbox({ pod_sandbox_id: id });
      await cri.RemovePodSandbox({ pod_sandbox_id: id });
      return;
    } catch (e) {
      if (attempt >= 5) throw e;
      await sleep(1000);
    }
  }
}

/** kc-w2 (kni stopped there) on the no-op CNI plugin: nothing wired, the control beside kni's node. */
function noopOnW2(): void {
  copyNoopCni(`${CL}/w2/root/opt/cni/bin`);
  writeNoopConflist(`${CL}/w2/root/etc/cni/net.d`);
}

interface SandboxTimes {
  /** Through kc-w1's containerd: kni wires it. */
  kni: number[];
  /** Through kc-w2's, on the no-op plugin, each right after one of kni's. */
  noop: number[];
  /** kni's own time per attach meanwhile (its metric), ms. */
  kniAttachMean: number;
}

/** RunPodSandbox (then Stop and Remove) through kc-w1's and kc-w2's containerd in turn, ms each, until `until` says stop. */
async function sandboxTimes(until: () => boolean, at: string): Promise<SandboxTimes> {
  const clients = { kni: criClient(`${CL}/w1/root/run/containerd/containerd.sock`), noop: criClient(`${CL}/w2/root/run/containerd/containerd.sock`) };
  const out: SandboxTimes = { kni: [], noop: [], kniAttachMean: NaN };
  const before = kniAttaches();
  try {
    for (let n = 0; !until() || n < 3; n++) {
      for (const k of ['kni', 'noop'] as const) {
        const cri = clients[k];
        const name = `kb-scale-${at}-${k}-${n}`;
        const t = Date.now();
        // Labelled as a kubelet labels a sandbox (the pod's labels, then its own). No Pod of that
        // name exists and no policy is in its namespace: kni's policy starts it without a read.
        const labels = { app: 'kb-scale', 'io.kubernetes.pod.name': name, 'io.kubernetes.pod.namespace': 'default', 'io.kubernetes.pod.uid': name };
        const { pod_sandbox_id: id } = await cri.RunPodSandbox({ config: { metadata: { name, namespace: 'default', uid: name, attempt: 0 }, labels, linux: {} } });
        out[k].push(Date.now() - t);
        await removeSandbox(cri, id);
      }
      await sleep(500);
    }
  } finally {
    clients.kni.close();
    clients.noop.close();
  }
  out.kniAttachMean = attachMean(before, kniAttaches());
  return out;
}

/** Runs fn over items, `width` at a time. */
async function inParallel<T>(items: T[], width: number, fn: (x: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) await fn(items[next++]);
  }));
}

const ms = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? '—' : `${Math.round(x)} ms`);
const spreadOf = (xs: number[]) => (xs.length ? `${ms(percentile(xs, 50))} / ${ms(percentile(xs, 99))}` : '—');
const times = (xs: number[]) => (xs.length ? `${ms(percentile(xs, 50))} / ${ms(Math.max(...xs))}` : '—');

interface Stall { stall: number; cpu: number; wait: number; gc: number }
interface Step { label: string; stall: Stall; quietStall: Stall; routes: number[]; single?: number; sandboxDuring: SandboxTimes; rss: number; cpuS: number; requests: Record<string, number>; chains: Record<string, number> }

async function main(): Promise<void> {
  cluster('down');
  cluster('up');
  // kni (and only kni: not containerd nor the CNI plugins it runs) with the turn probe.
  withTurnProbe(TURNS_FILE, () => cluster('kni'));
  cluster('kni-stop w2');
  noopOnW2();
  const kwok = startKwok(KWOK_STAGES, LEASE_SECONDS);
  // The control plane, kwok and this bench on the second CPU: on a real node kni shares no CPU
  // with the API server and etcd, and its event-loop delay would count their turns as kni's
  // stalls. kni itself is not pinned: its garbage collector's threads mark beside its main
  // thread, as on any node with more than one CPU (pinned to one, a mark waits for the CPU).
  for (const name of ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler']) pin(Number(fs.readFileSync(`${CL}/run/${name}.pid`, 'utf8').trim()), 1);
  pin(kwok.pid!, 1);
  pin(process.pid, 1);
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(KUBECONFIG);
  const api = kc.makeApiClient(k8s.CoreV1Api);
  const routes = new RouteWatch();
  const stalls = new StallWatch();
  const steps: Step[] = [];
  let auditAt = kniRequests(0).end;
  let cpuAt = cpuMs(kniPid());
  let created = 0;
  const createdAt = new Map<number, number>();
  const routedAfter = (i: number, at: number, seen: Map<string, number>): number | undefined => {
    const a = seen.get(v4Cidr(i));
    const b = seen.get(v6Cidr(i));
    return a !== undefined && b !== undefined && a >= at && b >= at ? Math.max(a, b) - at : undefined;
  };
  const waitRouted = async (ids: number[], seen: Map<string, number>, since: Map<number, number>, what: string) => {
    const deadline = Date.now() + 600_000;
    while (ids.some((i) => routedAfter(i, since.get(i)!, seen) === undefined)) {
      if (Date.now() > deadline) throw new Error(`${what}: ${ids.filter((i) => routedAfter(i, since.get(i)!, seen) === undefined).length} of ${ids.length} Nodes' routes never seen`);
      await sleep(200);
    }
    return ids.map((i) => routedAfter(i, since.get(i)!, seen)!);
  };
  const finish = async (label: string, stall: Stall, routeTimes: number[], sandboxDuring: SandboxTimes, single?: number): Promise<void> => {
    await sleep(QUIET_MS);
    const quietStall = await stalls.take();
    const audit = kniRequests(auditAt);
    auditAt = audit.end;
    const cpu = cpuMs(kniPid());
    steps.push({ label, stall, quietStall, routes: routeTimes, single, sandboxDuring, rss: rssMb(kniPid()), cpuS: (cpu.user + cpu.system - cpuAt.user - cpuAt.system) / 1000, requests: audit.counts, chains: kniChains() });
    cpuAt = cpu;
    process.stdout.write(`node-scale: ${label} done\n`);
  };

  try {
    await sleep(10_000);
    await stalls.take();
    const quietSandbox = await sandboxTimes(() => true, 'quiet');
    for (const size of SIZES) {
      const ids = Array.from({ length: size - created }, (_, k) => created + k);
      await stalls.take();
      let joining = true;
      const during = sandboxTimes(() => !joining, `join${size}`);
      await inParallel(ids, CREATES_AT_ONCE, async (i) => {
        createdAt.set(i, Date.now());
        await api.createNode({ body: madeUpNode(i) });
      });
      const routeTimes = await waitRouted(ids, routes.added, createdAt, `${size} Nodes`);
      joining = false;
      const sandboxDuring = await during;
      const stall = await stalls.take();
      created = size;
      // One more Node once all are in, and it leaves again: a single join at this size.
      await sleep(5_000);
      const one = size;
      createdAt.set(one, Date.now());
      await api.createNode({ body: madeUpNode(one) });
      const [single] = await waitRouted([one], routes.added, createdAt, 'one Node');
      await api.deleteNode({ name: `kb-scale-${one}` });
      await finish(`${created} Nodes`, stall, routeTimes, sandboxDuring, single);
    }
    // All leave at once.
    await stalls.take();
    const deletedAt = new Map<number, number>();
    const all = Array.from({ length: created }, (_, i) => i);
    let leaving = true;
    const during = sandboxTimes(() => !leaving, 'leave');
    await inParallel(all, CREATES_AT_ONCE, async (i) => {
      deletedAt.set(i, Date.now());
      await api.deleteNode({ name: `kb-scale-${i}` });
    });
    const gone = await waitRouted(all, routes.deleted, deletedAt, 'the Nodes leaving');
    leaving = false;
    const sandboxDuring = await during;
    await finish(`all ${created} leave`, await stalls.take(), gone, sandboxDuring);

    process.stdout.write(`\nkni as the node agent of one Node among N made-up Nodes kept Ready by kwok (leases of ${LEASE_SECONDS} s), all peers over vxlan and silent; the API server, etcd and kwok on CPU 1\n`);
    process.stdout.write(`RunPodSandbox through containerd, quiet, p50 / max: ${times(quietSandbox.kni)} with kni (its own attach: ${ms(quietSandbox.kniAttachMean)} mean); ${times(quietSandbox.noop)} on the no-op plugin (kc-w2, no kni)\n\n`);
    const rows: [string, (s: Step) => string][] = [
      ['longest stall, while Nodes join / leave', (s) => ms(s.stall.stall)],
      ['longest stall, the quiet minute after', (s) => ms(s.quietStall.stall)],
      ["of kni's turns over 20 ms (join or leave / quiet): the most on a CPU in one", (s) => `${ms(s.stall.cpu)} / ${ms(s.quietStall.cpu)}`],
      ['the same: the most waiting for a CPU in one', (s) => `${ms(s.stall.wait)} / ${ms(s.quietStall.wait)}`],
      ['the same: the longest one\'s time in garbage-collection pauses', (s) => `${ms(s.stall.gc)} / ${ms(s.quietStall.gc)}`],
      ['Node → its routes, p50 / p99', (s) => spreadOf(s.routes)],
      ['one Node more → its routes', (s) => ms(s.single)],
      ['RunPodSandbox meanwhile, with kni, p50 / max', (s) => times(s.sandboxDuring.kni)],
      ['the same on the no-op plugin (no kni), in turn with it', (s) => times(s.sandboxDuring.noop)],
      ["kni's own time per attach meanwhile, mean (its metric)", (s) => ms(s.sandboxDuring.kniAttachMean)],
      ['kni RSS after', (s) => `${Math.round(s.rss)} MB`],
      ['kni CPU in the step', (s) => `${s.cpuS.toFixed(1)} s`],
    ];
    process.stdout.write(`| | ${steps.map((s) => s.label).join(' | ')} |\n|---|${steps.map(() => '---|').join('')}\n`);
    for (const [name, f] of rows) process.stdout.write(`| ${name} | ${steps.map(f).join(' | ')} |\n`);
    const verbs = [...new Set(steps.flatMap((s) => Object.keys(s.requests)))].sort();
    for (const v of verbs) process.stdout.write(`| API: ${v} | ${steps.map((s) => s.requests[v] ?? 0).join(' | ')} |\n`);
    const chains = [...new Set(steps.flatMap((s) => Object.keys(s.chains)))].sort();
    for (const c of chains) process.stdout.write(`| ${c} | ${steps.map((s) => s.chains[c] ?? 0).join(' | ')} |\n`);
  } finally {
    stalls.stop();
    routes.stop();
    kwok.kill();
    try {
      execFileSync(`${BIN}/kubectl`, ['--kubeconfig', KUBECONFIG, 'delete', 'node', '-l', `${LABEL}=1`, '--wait=false'], { stdio: 'ignore' });
    } catch {
      // the cluster goes next anyway
    }
    cluster('down');
    fs.rmSync(TURNS_FILE, { force: true });
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`node-scale: ${(e as Error).stack}\n`);
    process.exit(1);
  },
);
