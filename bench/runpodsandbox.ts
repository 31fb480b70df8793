// RunPodSandbox and StopPodSandbox + RemovePodSandbox through containerd's CRI, where users see
// a network: kni (kni-cni, and NRI on containerd 2.x), the CNI reference plugins (bridge +
// host-local, ipMasq), and a no-op plugin (bench/noop-cni.c: nothing made, the floor no
// network goes below). Whole daemons alternate in blocks, each block on a fresh containerd
// (and a fresh kni for kni's), in an order rotated block by block, so that a drift of the
// machine lands on all three alike. Then kni's footprint: its resident memory idle, and with
// 110 pods (the kubelet's default maximum) running.
//   node dist/bench/runpodsandbox.js [--pods 100] [--blocks 5] [--at-once 1] [--flavour both|1.6|2]
import { Command } from 'commander';
import fs from 'node:fs';
import path from 'node:path';
import { BIN } from '../test/cluster/cluster-helpers';
import { ContainerdEnv, CONTAINERD_16, CONTAINERD_2, Flavour } from '../test/helpers/containerd-env';
import { RUN } from '../test/helpers/sh';
import { TestDaemon } from '../test/helpers/test-daemon';
import { waitFor } from '../test/helpers/wait';
import { copyNoopCni, writeNoopConflist } from './noop-network';
import { percentile, rssMb } from './stats';

type Network = 'kni' | 'reference' | 'no-op';
const NETWORKS: Network[] = ['kni', 'reference', 'no-op'];

interface Sample {
  run: number[];
  teardown: number[];
  /** Each block's RunPodSandbox p50: how far the run drifts from block to block. */
  blockRun: number[];
}

const referenceConflist = (dir: string): string =>
  JSON.stringify({
    cniVersion: '1.0.0',
    name: 'bridge-reference',
    plugins: [{ type: 'bridge', bridge: 'cniref0', isGateway: true, ipMasq: true, hairpinMode: true, ipam: { type: 'host-local', ranges: [[{ subnet: '10.88.0.0/16' }]], routes: [{ dst: '0.0.0.0/0' }], dataDir: `${dir}/host-local` } }],
  });

const podConfig = (c: ContainerdEnv, name: string) => ({ metadata: { name, namespace: 'bench', uid: name, attempt: 0 }, hostname: 'b', log_directory: `${c.dir}/logs`, linux: {} });

/** `count` pods, `atOnce` at a time: each RunPodSandbox timed, then its Stop + Remove. */
async function measure(c: ContainerdEnv, label: string, count: number, atOnce: number, into: Sample): Promise<void> {
  const cri = c.cri();
  const runs: number[] = [];
  let next = 0;
  const one = async (i: number, keep: boolean) => {
    let s = process.hrtime.bigint();
    const { pod_sandbox_id } = await cri.RunPodSandbox({ config: podConfig(c, `${label}-${i}`) });
    const run = Number(process.hrtime.bigint() - s) / 1e6;
    s = process.hrtime.bigint();
    await cri.StopPodSandbox({ pod_sandbox_id });
    await cri.RemovePodSandbox({ pod_sandbox_id });
    if (keep) {
      runs.push(run);
      into.teardown.push(Number(process.hrtime.bigint() - s) / 1e6);
    }
  };
  for (let i = 0; i < 3; i++) await one(-1 - i, false); // warm-up: the image, the shim binary, the plugins' pages
  await Promise.all(Array.from({ length: atOnce }, async () => {
    while (next < count) await one(next++, true);
  }));
  into.run.push(...runs);
  into.blockRun.push(percentile(runs, 50));
  cri.close();
}

/** Only this network's conflist in the CNI dir. */
function useNetwork(c: ContainerdEnv, n: Network): void {
  for (const f of fs.readdirSync(c.confDir)) fs.rmSync(path.join(c.confDir, f));
  if (n === 'reference') fs.writeFileSync(`${c.confDir}/05-reference.conflist`, referenceConflist(c.dir));
  if (n === 'no-op') writeNoopConflist(c.confDir);
}

/** kni started beside a running containerd: serving, its conflist written, on NRI registered (2.x). */
async function startKni(c: ContainerdEnv, d: TestDaemon): Promise<void> {
  const registrations = () => (d.output.match(/registered with the runtime over NRI/g) ?? []).length;
  const before = registrations();
  await d.launch();
  await waitFor(() => fs.existsSync(`${c.confDir}/10-kni.conflist`), 30_000, () => 'kni did not write its conflist');
  if (c.flavour.v2) await waitFor(() => registrations() > before, 30_000, () => 'kni did not register over NRI');
}

async function benchFlavour(flavour: Flavour, o: { pods: number; blocks: number; atOnce: number }): Promise<{ samples: Map<Network, Sample>; footprint: { idle: number; full: number } }> {
  const c = new ContainerdEnv(`/tmp/${RUN}-ctrd`, '', flavour);
  const d = await TestDaemon.start(c.kniConfig());
  c.nodeNetns = d.nodeNetns;
  const samples = new Map(NETWORKS.map((n) => [n, { run: [], teardown: [], blockRun: [] } as Sample]));
  try {
    c.writeConfig();
    for (const p of ['bridge', 'host-local']) fs.copyFileSync(`/usr/lib/cni/${p}`, `${c.binDir}/${p}`);
    copyNoopCni(c.binDir);
    await d.stop();
    const perBlock = Math.ceil(o.pods / o.blocks);
    for (let b = 0; b < o.blocks; b++) {
      for (let k = 0; k < NETWORKS.length; k++) {
        const n = NETWORKS[(b + k) % NETWORKS.length];
        useNetwork(c, n);
        await c.start();
        if (n === 'kni') await startKni(c, d);
        await measure(c, `${n}-${b}`, perBlock, o.atOnce, samples.get(n)!);
        await c.stopDaemon();
        if (n === 'kni') {
          d.closeClients();
          await d.stop();
        }
        process.stderr.write(`  ${flavour.name}, block ${b + 1}/${o.blocks}: ${n} done\n`);
      }
    }
    // Footprint: kni's own resident memory, 5 s after start with no pod, then with 110 pods.
    useNetwork(c, 'kni');
    await c.start();
    await startKni(c, d);
    await new Promise((r) => setTimeout(r, 5000));
    const idle = rssMb(d.proc!.pid!);
    const cri = c.cri();
    for (let i = 0; i < 110; i++) await cri.RunPodSandbox({ config: podConfig(c, `full-${i}`) });
    await new Promise((r) => setTimeout(r, 2000));
    const full = rssMb(d.proc!.pid!);
    return { samples, footprint: { idle, full } };
  } finally {
    await c.stop(); // removes every sandbox through CRI while kni still answers
    d.cleanup();
  }
}

function report(flavour: Flavour, samples: Map<Network, Sample>, footprint: { idle: number; full: number }, o: { pods: number; atOnce: number }): string {
  const p = (xs: number[], q: number) => percentile(xs, q).toFixed(1);
  const spread = (s: Sample) => `${Math.min(...s.blockRun).toFixed(1)}–${Math.max(...s.blockRun).toFixed(1)}`;
  const kni = samples.get('kni')!;
  const lines = [
    `\n${flavour.name} + runc, ${o.pods} pods per network in alternating blocks, ${o.atOnce} at once; ms`,
    '',
    '| network | RunPodSandbox p50 / p90 | block p50s (the run\'s spread) | Stop + Remove p50 / p90 |',
    '|---|---|---|---|',
    ...NETWORKS.map((n) => {
      const s = samples.get(n)!;
      return `| ${n} | ${p(s.run, 50)} / ${p(s.run, 90)} | ${spread(s)} | ${p(s.teardown, 50)} / ${p(s.teardown, 90)} |`;
    }),
    '',
  ];
  for (const other of ['no-op', 'reference'] as Network[]) {
    const s = samples.get(other)!;
    const r = (a: number[], b: number[], q: number) => (percentile(a, q) / percentile(b, q)).toFixed(2);
    lines.push(`kni ÷ ${other}: RunPodSandbox ${r(kni.run, s.run, 50)}× (p50), ${r(kni.run, s.run, 90)}× (p90); Stop + Remove ${r(kni.teardown, s.teardown, 50)}× (p50)`);
  }
  lines.push(`kni's resident memory: ${footprint.idle.toFixed(0)} MB idle (no pod), ${footprint.full.toFixed(0)} MB with 110 pods`);
  return lines.join('\n');
}

async function main(): Promise<void> {
  const o = new Command()
    .option('--pods <n>', 'pods per network and containerd', (v) => Math.max(20, Number(v)), 100)
    .option('--blocks <n>', 'blocks each network runs in', (v) => Math.max(1, Number(v)), 5)
    .option('--at-once <n>', 'RunPodSandbox calls at once', (v) => Math.max(1, Number(v)), 1)
    .option('--flavour <which>', 'both, 1.6 (Debian\'s) or 2 (the test cluster\'s build)', 'both')
    .parse()
    .opts<{ pods: number; blocks: number; atOnce: number; flavour: string }>();
  const flavours: Flavour[] = [];
  if (o.flavour !== '2') flavours.push(CONTAINERD_16);
  if (o.flavour !== '1.6') {
    if (!fs.existsSync(`${BIN}/containerd`)) throw new Error(`${BIN}/containerd is missing: run bash hack/cluster/build-components.sh containerd`);
    flavours.push(CONTAINERD_2(BIN));
  }
  const out: string[] = [];
  for (const f of flavours) {
    const { samples, footprint } = await benchFlavour(f, o);
    out.push(report(f, samples, footprint, o));
  }
  console.log(out.join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
