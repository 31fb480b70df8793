// What kni-cni adds over calling the daemon directly: the same STATUS check through the exec'd
// shim and as a gRPC call, and the shim exec alone (VERSION, answered without the daemon).
//   node dist/bench/shim-overhead.js [N=300]
import { spawnSync } from 'node:child_process';
import { SHIM } from '../test/helpers/cni-exec';
import { TestDaemon } from '../test/helpers/test-daemon';
import { percentile } from './stats';

const N = Number(process.argv[2] ?? 300);

async function main(): Promise<void> {
  const d = await TestDaemon.start();
  try {
    const conf = JSON.stringify({ cniVersion: '1.1.0', name: 'kni', socket: d.cniSocket });
    const time = async (fn: () => unknown | Promise<unknown>) => {
      const xs: number[] = [];
      for (let i = 0; i < N + 20; i++) {
        const s = process.hrtime.bigint();
        await fn();
        if (i >= 20) xs.push(Number(process.hrtime.bigint() - s) / 1e6);
      }
      return xs;
    };
    const exec = (cmd: string) => () => {
      const r = spawnSync(SHIM, [], { input: conf, env: { CNI_COMMAND: cmd } });
      if (r.status !== 0) throw new Error(`kni-cni ${cmd} failed: ${r.stdout}`);
    };
    const rt = d.rt();
    const grpc = await time(() => rt.GetNode({}));
    const version = await time(exec('VERSION'));
    const status = await time(exec('STATUS'));
    const f = (xs: number[]) => `${percentile(xs, 50).toFixed(2)} / ${percentile(xs, 90).toFixed(2)}`;
    console.log(`\nN = ${N}, ms (p50 / p90), exec'd from Node with spawnSync\n`);
    console.log('| call | time |\n|---|---|');
    console.log(`| gRPC GetNode (daemon round trip) | ${f(grpc)} |`);
    console.log(`| kni-cni VERSION (exec only, no daemon) | ${f(version)} |`);
    console.log(`| kni-cni STATUS (exec + daemon round trip) | ${f(status)} |`);
    console.log(`\nshim over the daemon round trip (p50): ${(percentile(status, 50) - percentile(grpc, 50)).toFixed(2)} ms; of which process exec: ${percentile(version, 50).toFixed(2)} ms`);
  } finally {
    d.cleanup();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
