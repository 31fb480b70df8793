// Times CRI RunPodSandbox (and Stop + Remove) on one private containerd 1.6 + runc, first with
// kni's conflist (kni-cni), then with the CNI reference bridge + host-local (ipMasq on), in the
// same run, and prints both and the ratios.   node dist/bench/runpodsandbox.js [N=30]
import fs from 'node:fs';
import { ContainerdEnv } from '../test/helpers/containerd-env';
import { TestDaemon } from '../test/helpers/test-daemon';
import { percentile } from './stats';

const N = Math.max(20, Number(process.argv[2] ?? 30));

interface Timing {
  run: number[];
  teardown: number[];
}

async function measure(c: ContainerdEnv, label: string): Promise<Timing> {
  const cri = c.cri();
  const t: Timing = { run: [], teardown: [] };
  for (let i = -3; i < N; i++) { // 3 warm-up pods
    const config = { metadata: { name: `${label}-${i + 3}`, namespace: 'bench', uid: `${label}-${i + 3}`, attempt: 0 }, hostname: 'b', log_directory: `${c.dir}/logs`, linux: {} };
    let s = process.hrtime.bigint();
    const { pod_sandbox_id } = await cri.RunPodSandbox({ config });
    const run = Number(process.hrtime.bigint() - s) / 1e6;
    s = process.hrtime.bigint();
    await cri.StopPodSandbox({ pod_sandbox_id });
    await cri.RemovePodSandbox({ pod_sandbox_id });
    const teardown = Number(process.hrtime.bigint() - s) / 1e6;
    if (i >= 0) {
      t.run.push(run);
      t.teardown.push(teardown);
    }
  }
  cri.close();
  return t;
}

function referenceConflist(dir: string): string {
  return JSON.stringify({
    cniVersion: '1.0.0',
    name: 'bridge-reference',
    plugins: [{
      type: 'bridge', bridge: 'cniref0', isGateway: true, ipMasq: true, hairpinMode: true,
      ipam: { type: 'host-local', ranges: [[{ subnet: '10.88.0.0/16' }]], routes: [{ dst: '0.0.0.0/0' }], dataDir: `${dir}/host-local` },
    }],
  });
}

async function main(): Promise<void> {
  const c = ContainerdEnv.forRun('');
  const d = await TestDaemon.start(c.kniConfig());
  c.nodeNetns = d.nodeNetns;
  try {
    c.writeConfig();
    await c.start();
    const kni = await measure(c, 'kni');

    await c.stopDaemon();
    await d.stop();
    fs.rmSync(`${c.confDir}/10-kni.conflist`);
    for (const p of ['bridge', 'host-local']) fs.copyFileSync(`/usr/lib/cni/${p}`, `${c.binDir}/${p}`);
    for (const p of ['bridge', 'host-local']) fs.chmodSync(`${c.binDir}/${p}`, 0o755);
    fs.writeFileSync(`${c.confDir}/05-reference.conflist`, referenceConflist(c.dir));
    await c.start();
    const ref = await measure(c, 'ref');

    const row = (name: string, a: number[], b: number[]) => {
      const [a50, a90, b50, b90] = [percentile(a, 50), percentile(a, 90), percentile(b, 50), percentile(b, 90)];
      return `| ${name} | ${a50.toFixed(1)} / ${a90.toFixed(1)} | ${b50.toFixed(1)} / ${b90.toFixed(1)} | ${(b50 / a50).toFixed(2)}× / ${(b90 / a90).toFixed(2)}× |`;
    };
    console.log(`\ncontainerd 1.6 + runc, N = ${N} pods each, ms (p50 / p90)\n`);
    console.log('| CRI call | kni (kni-cni) | bridge + host-local, ipMasq | reference ÷ kni |');
    console.log('|---|---|---|---|');
    console.log(row('RunPodSandbox', kni.run, ref.run));
    console.log(row('StopPodSandbox + RemovePodSandbox', kni.teardown, ref.teardown));
  } finally {
    await c.stop();
    d.cleanup();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
