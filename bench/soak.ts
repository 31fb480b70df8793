// npm run soak: 10 000 attach+detach cycles, 16 at once, through the gRPC API; prints the
// daemon's RSS every 1000 cycles (memory must stay flat) and writes bench/results/soak-latest.json.
//   node dist/bench/soak.js [--cycles 10000]
import fs from 'node:fs';
import path from 'node:path';
import { Command } from 'commander';
import { packageRoot } from '../plugin/server/protos';
import { TestDaemon } from '../test/helpers/test-daemon';
import { rssMb } from './stats';

async function main(): Promise<void> {
  const o = new Command().option('--cycles <n>', 'attach+detach cycles', '10000').parse().opts<{ cycles: string }>();
  const cycles = Number(o.cycles);
  if (!(cycles >= 1000 && cycles <= 1e6)) throw new Error('--cycles must be 1000..1000000');
  if (process.getuid?.() !== 0) throw new Error('the soak needs root (network namespaces, links)');
  const d = await TestDaemon.start({ ranges: ['10.70.0.0/22', 'fd00:70::/64'] });
  try {
    const kni = d.kni();
    const rt = d.rt();
    const rss = () => rssMb(d.proc!.pid!);
    const samples: { cycles: number; rssMb: number; seconds: number }[] = [{ cycles: 0, rssMb: rss(), seconds: 0 }];
    const t0 = performance.now();
    let done = 0;
    let next = 0;
    process.stdout.write('| cycles | daemon RSS (MB) | elapsed (s) |\n|---|---|---|\n');
    process.stdout.write(`| 0 | ${samples[0].rssMb.toFixed(1)} | 0 |\n`);
    await Promise.all(Array.from({ length: 16 }, async () => {
      for (let i = next++; i < cycles; i = next++) {
        const n = await kni.CreateNetwork({});
        await rt.Attach({ sandbox_id: `soak-${i}`, netns_path: n.netns_path });
        await rt.Detach({ sandbox_id: `soak-${i}` });
        if (++done % 1000 === 0) {
          const s = { cycles: done, rssMb: rss(), seconds: (performance.now() - t0) / 1000 };
          samples.push(s);
          process.stdout.write(`| ${s.cycles} | ${s.rssMb.toFixed(1)} | ${s.seconds.toFixed(0)} |\n`);
        }
      }
    }));
    const ipam = await rt.GetIPAMStatus({});
    const leftover = ipam.ranges.map((r: any) => Number(r.used)).reduce((a: number, b: number) => a + b, 0);
    const out = { date: new Date().toISOString(), cycles, samples, leftoverAddresses: leftover, leftoverPins: fs.readdirSync(d.netnsDir).length };
    fs.mkdirSync(path.join(packageRoot(), 'bench/results'), { recursive: true });
    fs.writeFileSync(path.join(packageRoot(), 'bench/results/soak-latest.json'), JSON.stringify(out, null, 2));
    const first = samples[1]?.rssMb ?? samples[0].rssMb;
    process.stdout.write(`\nRSS after 1000 cycles ${first.toFixed(1)} MB, after ${cycles} ${samples.at(-1)!.rssMb.toFixed(1)} MB; leftover addresses ${leftover}, netns pins ${out.leftoverPins}\n`);
  } finally {
    d.cleanup();
  }
}

main().catch((e) => {
  console.error(`soak: ${(e as Error).message}`);
  process.exit(1);
});
