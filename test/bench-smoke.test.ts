// The microbenchmark, the regression guard of kni's attach, run end to end with small numbers:
// npm run bench is not part of the test command (it takes minutes), so this is what says it
// still works — the daemon, both clients, the exec'd paths, the kernel floor
// (bench/kernel-floor.c) beside kni, the scale step, churn, the transport floor — and prints
// every figure to watch. The figures themselves are not judged here (speed is measured, not
// asserted).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../plugin/server/protos';
import { RUN } from './helpers/sh';

const FIGURES = [
  /^\| in-daemon attach p50 ÷ the kernel floor \(alternating blocks\) \| [\d.]+× .*\|$/m,
  /^\| gRPC Attach p50 − in-daemon p50 \| [+-][\d.]+ ms .*\|$/m,
  /^\| … the same from a Go client \(grpc-go, as containerd calls\) \| [+-][\d.]+ ms \|$/m,
  /^\| attaches\/s 16 at once ÷ one at a time \(alternating blocks\) \| [\d.]+× .*\|$/m,
  /^\| DEL p50 \(netns made by the runtime\) \| [\d.]+ ms \|$/m,
  /^\| attach at \d+ pods ÷ attach at \d+ \(p50\) \| [\d.]+× \|$/m,
  /^\| daemon RSS at \d+ pods \| \d+ MB \|$/m,
];

describe('npm run bench, end to end with small numbers (real kernel, the reference plugins, the C floor)', function () {
  this.timeout(300_000);
  const results = `/tmp/${RUN}-bench`;
  after(() => fs.rmSync(results, { recursive: true, force: true }));

  it('runs every path and the kernel floor, prints kni ÷ floor and every figure to watch, writes its figures where told, and leaves no netns', () => {
    const r = spawnSync(process.execPath, [path.join(packageRoot(), 'dist/bench/network-bench.js'), '--n', '10', '--churn-seconds', '1', '--scale', '2,5', '--warm-up', '20,20', '--results', results], { encoding: 'utf8' });
    assert.equal(r.status, 0, `bench failed:\n${r.stderr.slice(-3000)}`);
    for (const row of ['kni gRPC', 'kni gRPC, Go client', 'kni POC API (kni makes the netns)', 'kni-cni (exec)', 'bridge + host-local + loopback (exec)']) {
      for (const at of [1, 8, 16]) assert.ok(r.stdout.includes(`| ${row} | ${at} | `), `no ${row} row at ${at} at once:\n${r.stdout}`);
    }
    assert.match(r.stdout, /^\| attach, in-daemon \| [\d.]+ \/ [\d.]+ \| [\d.]+ \/ [\d.]+ \| [\d.]+× \|$/m, 'kni ÷ the kernel floor');
    assert.match(r.stdout, /^Alternating blocks \(8 × 50 pods.*the floor [\d.]+ ms: [\d.]+×; the floor paced as kni's attaches came/m);
    for (const f of FIGURES) assert.match(r.stdout, f);
    const json = JSON.parse(fs.readFileSync(path.join(results, 'latest.json'), 'utf8'));
    assert.equal(json.n, 10);
    assert.ok(json.floor.attach.n === 10 && json.floor.attach.p50 > 0, `the kernel floor timed each of its attaches: ${JSON.stringify(json.floor)}`);
    assert.ok(json.figures.length >= FIGURES.length);
    assert.ok(fs.readFileSync(path.join(results, 'latency.svg'), 'utf8').startsWith('<svg'));
    // Only the bench's own names (kb<its pid>…): other processes' netns come and go meanwhile.
    const own = `kb${r.pid!.toString(36)}`;
    const left = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout.split('\n').filter((l) => l.startsWith(own));
    assert.deepEqual(left, [], 'the bench left a netns behind');
    assert.ok(!fs.existsSync(`/run/${own}-netns`) || fs.readdirSync(`/run/${own}-netns`).length === 0, "the bench left a pod's netns pinned");
  });
});
