// npm run bench: kni against the CNI reference plugins, same machine, same run, same N.
//   node dist/bench/network-bench.js [--n 500] [--churn-seconds 60] [--scale 10,100,1000]
//     [--warm-up 2000,1000] [--results bench/results]
// Everything runs inside a throwaway netns standing in for the node (the bench re-executes
// itself there), so the daemon, kni-cni and the reference plugins all see the same node and
// the host's own networking is never touched. Results: a markdown table on stdout, the raw
// figures in bench/results/<time>.json (and latest.json), a chart in bench/results/latency.svg.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import { packageRoot } from '../plugin/server/protos';
import { Bench, BenchOpts } from './bench-node';
import { benchReport, BenchRow, GRPC_PATH } from './bench-report';
import { BENCH_BINARIES } from './bench-paths';
import { GO_PATH } from './go-client';
import { latencyChart } from './latency-chart';
import { runInNodeNetns } from './run-netns-mount';
import { transportFloor } from './transport-floor';

const ROOT = packageRoot();

async function inner(o: BenchOpts, warm: [number, number], results: string): Promise<void> {
  const b = new Bench(o);
  try {
    await b.startDaemon();
    process.stderr.write(`  warming the daemon and the clients up (${warm[0]} attach + detach from grpc-js, then ${warm[1]} from Go; not measured) ...\n`);
    const fresh = await b.warmUp(warm[0], warm[1]);
    const paths = b.paths();
    const rows: BenchRow[] = [];
    for (const concurrency of [1, 8, 16]) {
      for (const p of paths) {
        process.stderr.write(`  ${p.name}, ${concurrency} at once, N = ${o.n} ...\n`);
        rows.push({ path: p.name, concurrency, ...(await b.addDel(p, concurrency)) });
        // kni's API from Go next to the same API from grpc-js, before the exec'd paths: a cell
        // right after the reference plugins' (300 pods of process execs and iptables) ran slower,
        // the Go client's overhead + 0.30–0.47 ms against + 0.22–0.31 after the grpc-js cell
        if (p.name === GRPC_PATH) {
          process.stderr.write(`  ${GO_PATH}, ${concurrency} at once, N = ${o.n} ...\n`);
          rows.push({ path: GO_PATH, concurrency, ...(await b.addDelGo(concurrency)) });
        }
      }
    }
    process.stderr.write(`  kernel floor (C), N = ${o.n} ...\n`);
    const floor = b.floor(o.n);
    process.stderr.write('  in-daemon attach and the floor, alternating blocks of 50 ...\n');
    const versus = await b.versusFloor(8, 50);
    process.stderr.write('  scale ...\n');
    const scale = await b.scale();
    process.stderr.write(`  churn for ${o.churnSeconds} s ...\n`);
    const churn = await b.churn();
    // After the scale step: run before it (run 50), their attaches raised the daemon's RSS it reports.
    process.stderr.write(`  one at a time and 16 at once, alternating blocks of ${o.n} ...\n`);
    const concurrencyBlocks = await b.concurrencyBlocks(4, o.n, 16);
    process.stderr.write('  transport floor ...\n');
    const transport = await transportFloor(400, b.kniClient());

    const { text, figures } = benchReport({ n: o.n, podLink: o.podLink, rows, floor, versus, concurrencyBlocks, scale, churn, transport, fresh });
    process.stdout.write(text);

    fs.mkdirSync(results, { recursive: true });
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    const json = JSON.stringify({ date: new Date().toISOString(), machine: { cpus: os.cpus().length, kernel: os.release(), node: process.version }, n: o.n, podLink: o.podLink, rows, floor, versus, concurrencyBlocks, scale, churn, transport, fresh, figures }, null, 2);
    fs.writeFileSync(path.join(results, `${stamp}.json`), json);
    fs.writeFileSync(path.join(results, 'latest.json'), json);
    fs.writeFileSync(path.join(results, 'latency.svg'), latencyChart(rows, `kni vs CNI reference plugins, N = ${o.n} (ms per pod, log scale)`));
    const shown = path.relative(ROOT, results).startsWith('..') ? results : path.relative(ROOT, results);
    process.stdout.write(`\nraw figures: ${shown}/${stamp}.json (and latest.json); chart: ${shown}/latency.svg\n`);
  } finally {
    b.stop();
  }
}

async function main(): Promise<void> {
  const program = new Command()
    .option('--n <n>', 'pods per cell', '500')
    .option('--churn-seconds <s>', 'churn duration', '60')
    .option('--scale <list>', 'pod counts already attached for the scale test', '10,100,1000')
    .option('--pod-link <how>', 'kni\'s podLink (and the kernel floor to match): routed or bridge', 'routed')
    .option('--warm-up <grpcjs,go>', 'unmeasured attach + detach cycles before the cells, from grpc-js then from Go', '2000,1000')
    .option('--results <dir>', 'where the raw figures and the chart go', path.join(ROOT, 'bench/results'))
    .option('--inner <dir>', '(internal) run inside the node netns with this work dir')
    .parse();
  const raw = program.opts<{ n: string; churnSeconds: string; scale: string; podLink: string; warmUp: string; results: string; inner?: string }>();
  const warm = raw.warmUp.split(',').map(Number) as [number, number];
  if (warm.length !== 2 || !warm.every((x) => Number.isInteger(x) && x >= 0 && x <= 100_000)) throw new Error('--warm-up takes two whole numbers (grpc-js cycles, Go cycles), e.g. 2000,1000');
  const results = path.resolve(raw.results);
  const o: BenchOpts = { n: Number(raw.n), churnSeconds: Number(raw.churnSeconds), scale: raw.scale.split(',').map(Number), podLink: raw.podLink as BenchOpts['podLink'], dir: raw.inner ?? '' };
  if (!(o.n >= 10 && o.n <= 5000) || !(o.churnSeconds > 0) || o.scale.some((x) => !(x >= 1 && x <= 5000))) throw new Error('--n must be 10..5000, --churn-seconds > 0, --scale counts 1..5000');
  if (o.podLink !== 'routed' && o.podLink !== 'bridge') throw new Error('--pod-link must be routed or bridge');
  if (raw.inner) return inner(o, warm, results);
  if (process.getuid?.() !== 0) throw new Error('the benchmark needs root (network namespaces, links)');
  for (const bin of BENCH_BINARIES) {
    if (!fs.existsSync(bin)) throw new Error(`${bin} is missing: run bash hack/setup.sh`);
  }
  const name = `kb${process.pid.toString(36)}`;
  const dir = `/tmp/${name}`;
  fs.mkdirSync(dir, { recursive: true });
  try {
    const status = runInNodeNetns(name, __filename, ['--n', raw.n, '--churn-seconds', raw.churnSeconds, '--scale', raw.scale, '--pod-link', raw.podLink, '--warm-up', raw.warmUp, '--results', results, '--inner', dir]);
    if (status !== 0) throw new Error(`benchmark failed (exit ${status})`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`bench: ${(e as Error).message}`);
  process.exit(1);
});
