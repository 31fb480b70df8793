// Pod startup in a real cluster (hack/cluster/cluster.sh): the time from `kubectl apply` of a
// 30-replica Deployment to every pod Ready, and the kubelet's RunPodSandbox latency, with kni as
// the network and then with the CNI reference plugins (bridge + host-local + portmap +
// loopback, as kindnet uses them), in the same run, ROUNDS times each, alternating. And kni's
// resident memory as the node agent (Kubernetes client on) on each worker: idle, before the
// Deployment, and with its pods.
//   node dist/bench/cluster-bench.js [ROUNDS=3]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { apply, CL, cluster, kubectl, kubectlJson, WEB, WORKERS } from '../test/cluster/cluster-helpers';
import { percentile, rssMb } from './stats';

const ROUNDS = Math.max(1, Number(process.argv[2] ?? 3));
const REPLICAS = 30;
type Network = 'kni' | 'reference-cni';

/** The kubelets' RunPodSandbox histogram sums and counts (their own metric, over x509). */
function sandboxLatency(): { sum: number; count: number } {
  let sum = 0;
  let count = 0;
  for (const w of WORKERS) {
    const ip = `10.240.0.${10 + Number(w.slice(1))}`;
    const out = execFileSync('curl', ['-sk', '--cert', `${CL}/pki/admin.crt`, '--key', `${CL}/pki/admin.key`, `https://${ip}:10250/metrics`], { encoding: 'utf8' });
    for (const l of out.split('\n')) {
      if (!l.includes('operation_type="run_podsandbox"')) continue;
      if (l.startsWith('kubelet_runtime_operations_duration_seconds_sum')) sum += Number(l.split(' ').pop());
      if (l.startsWith('kubelet_runtime_operations_duration_seconds_count')) count += Number(l.split(' ').pop());
    }
  }
  return { sum, count };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** kni's resident memory on each worker (MB), as the cluster started it (pid file under $CL/run). */
const kniRss = (): number[] => WORKERS.map((w) => rssMb(Number(fs.readFileSync(`${CL}/run/kni-${w}.pid`, 'utf8').trim())));

async function round(network: Network): Promise<{ readyMs: number; sandboxMs: number; idleRss?: number[]; podsRss?: number[] }> {
  cluster('down');
  cluster('up');
  cluster(network === 'kni' ? 'kni' : 'reference-cni');
  let idleRss: number[] | undefined;
  if (network === 'kni') {
    await sleep(10_000); // the informers' first lists done, the node set up
    idleRss = kniRss();
  }
  const before = sandboxLatency();
  const started = Date.now();
  apply(WEB(REPLICAS));
  for (;;) {
    const pods = kubectlJson('get', 'pods', '-l', 'app=web').items;
    const ready = pods.filter((p: any) => p.status.conditions?.some((c: any) => c.type === 'Ready' && c.status === 'True')).length;
    if (ready === REPLICAS) break;
    if (Date.now() - started > 300_000) throw new Error(`${network}: only ${ready} of ${REPLICAS} pods Ready after 300 s\n${kubectl('get', 'pods', '-o', 'wide')}`);
    await sleep(100);
  }
  const readyMs = Date.now() - started;
  const after = sandboxLatency();
  const sandboxMs = ((after.sum - before.sum) / Math.max(1, after.count - before.count)) * 1000;
  return { readyMs, sandboxMs, idleRss, podsRss: network === 'kni' ? kniRss() : undefined };
}

async function main(): Promise<void> {
  const results: Record<Network, { readyMs: number[]; sandboxMs: number[] }> = { kni: { readyMs: [], sandboxMs: [] }, 'reference-cni': { readyMs: [], sandboxMs: [] } };
  const idleRss: number[] = [];
  const podsRss: number[] = [];
  try {
    for (let r = 0; r < ROUNDS; r++) {
      for (const n of ['kni', 'reference-cni'] as Network[]) {
        const x = await round(n);
        results[n].readyMs.push(x.readyMs);
        results[n].sandboxMs.push(x.sandboxMs);
        idleRss.push(...(x.idleRss ?? []));
        podsRss.push(...(x.podsRss ?? []));
        process.stderr.write(`round ${r + 1} ${n}: ${REPLICAS} pods Ready in ${x.readyMs} ms, RunPodSandbox mean ${x.sandboxMs.toFixed(1)} ms\n`);
      }
    }
  } finally {
    cluster('down');
  }
  const med = (a: number[]) => percentile(a, 50);
  const k = results.kni;
  const c = results['reference-cni'];
  const rows = [
    `| | kni | CNI reference plugins | kni ÷ reference |`,
    `|---|---|---|---|`,
    `| ${REPLICAS} replicas: apply → all Ready (median of ${ROUNDS}) | ${med(k.readyMs).toFixed(0)} ms | ${med(c.readyMs).toFixed(0)} ms | ${(med(k.readyMs) / med(c.readyMs)).toFixed(2)} |`,
    `| kubelet RunPodSandbox, mean (median of ${ROUNDS}) | ${med(k.sandboxMs).toFixed(1)} ms | ${med(c.sandboxMs).toFixed(1)} ms | ${(med(k.sandboxMs) / med(c.sandboxMs)).toFixed(2)} |`,
  ];
  process.stdout.write(`${rows.join('\n')}\n`);
  const range = (a: number[]) => `${Math.min(...a).toFixed(0)}–${Math.max(...a).toFixed(0)} MB`;
  process.stdout.write(`kni's resident memory as the node agent (each worker, each round): ${range(idleRss)} idle, ${range(podsRss)} with ${REPLICAS / WORKERS.length} pods\n`);
  const dir = path.join(__dirname, '../../bench/results');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'cluster-latest.json'), JSON.stringify({ date: new Date().toISOString(), replicas: REPLICAS, rounds: ROUNDS, results, idleRss, podsRss }, null, 2));
}

main().catch((e) => {
  process.stderr.write(`${(e as Error).stack}\n`);
  cluster('down');
  process.exit(1);
});
