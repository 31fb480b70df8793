// Where an attach's time goes inside kni: runs the daemon under `node --cpu-prof` in a
// throwaway node netns, attaches and detaches N pods one at a time over gRPC, and prints the
// functions with the most self time (and the .cpuprofile path, for Chrome DevTools).
//   node dist/bench/profile-attach.js [--n 300] [--out DIR] [--no-detach] [--no-cpu-prof]
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Command } from 'commander';
import { runtimeClient } from '../plugin/client/clients';
import { createPinnedNetns, ensureNetnsDir, removePinnedNetns } from '../plugin/netns/netns';
import { packageRoot } from '../plugin/server/protos';
import { floorRun } from './kernel-floor-run';
import { runInNodeNetns } from './run-netns-mount';
import { cpuMs, percentile, perPod, rssMb, threadCpuMs } from './stats';
import { attachMsFromLog, readSteps, stepMeans } from './step-times';

/** Inside the throwaway node netns: nobody else listens there. */
const METRICS = '127.0.0.1:9464';

interface Node { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }
interface Profile { nodes: Node[]; samples: number[]; timeDeltas: number[] }

/** Self time per function (ms), from a V8 CPU profile. */
export function selfTimes(p: Profile): { fn: string; ms: number }[] {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const ms = new Map<string, number>();
  p.samples.forEach((id, i) => {
    const n = byId.get(id)!;
    const f = n.callFrame;
    const key = `${f.functionName || '(anonymous)'} ${f.url ? `${path.basename(f.url)}:${f.lineNumber + 1}` : ''}`.trim();
    ms.set(key, (ms.get(key) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000);
  });
  return [...ms].map(([fn, t]) => ({ fn, ms: t })).sort((a, b) => b.ms - a.ms);
}

async function inner(n: number, out: string, dir: string, detach: boolean, cpuProf: boolean): Promise<void> {
  const podDir = path.join('/run', `${path.basename(dir)}-netns`);
  const socket = path.join(dir, 'kni.sock');
  const config = path.join(dir, 'kni.json');
  fs.writeFileSync(config, JSON.stringify({ ranges: ['10.128.0.0/16', 'fd00:128::/64'], netnsDir: podDir, cni: { socket: path.join(dir, 'cni.sock') }, podLink: 'routed' }));
  const d = spawn(process.execPath, [...(cpuProf ? ['--cpu-prof', '--cpu-prof-dir', out] : []), path.join(packageRoot(), 'dist/plugin/main.js'), '--metrics-addr', METRICS, '--socket', socket, '--state-dir', path.join(dir, 'state'), '--config', config], { stdio: ['ignore', 'pipe', 'inherit'] });
  let log = '';
  d.stdout!.on('data', (b) => (log += b));
  const c = runtimeClient(socket);
  ensureNetnsDir(podDir);
  try {
    for (let i = 0; ; i++) {
      try {
        if ((await c.GetNode({}, 1000)).ready) break;
      } catch {
        if (i > 300) throw new Error(`daemon did not start: ${log}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    const pods = Array.from({ length: n }, (_, i) => ({ id: `prof${i}`, netns: createPinnedNetns(podDir, `prof${i}`) }));
    const mark = log.length;
    const grpcMs: number[] = [];
    const delMs: number[] = [];
    const steps0 = await readSteps(METRICS);
    const cpu0 = cpuMs(d.pid!);
    const threads0 = threadCpuMs(d.pid!);
    const client0 = process.cpuUsage();
    for (const p of pods) {
      const t = performance.now();
      await c.Attach({ sandbox_id: p.id, netns_path: p.netns });
      grpcMs.push(performance.now() - t);
    }
    const cpu1 = cpuMs(d.pid!);
    process.stdout.write(`the daemon's steps (kni_step_duration_seconds), mean per call over the ${n} attaches:\n`);
    for (const s of stepMeans(steps0, await readSteps(METRICS))) process.stdout.write(`  ${s.meanUs.toFixed(1).padStart(8)} µs  ${s.step} (${s.calls} calls)\n`);
    for (const [name, t] of threadCpuMs(d.pid!)) {
      const per = perPod(threads0.get(name) ?? { user: 0, system: 0 }, t, n);
      if (per.user + per.system > 0) process.stdout.write(`  thread ${name.padEnd(16)} ${per.user.toFixed(3)} ms user + ${per.system.toFixed(3)} ms system per attach\n`);
    }
    const client = process.cpuUsage(client0);
    const daemon = perPod(cpu0, cpu1, n);
    process.stdout.write(`CPU per attach: daemon ${daemon.user.toFixed(3)} ms user + ${daemon.system.toFixed(3)} ms system; this client ${(client.user / 1e3 / n).toFixed(3)} user + ${(client.system / 1e3 / n).toFixed(3)} system\n`);
    for (const p of detach ? pods : []) {
      const t = performance.now();
      await c.Detach({ sandbox_id: p.id, netns_ending: true });
      delMs.push(performance.now() - t);
    }
    // The same kernel work in C, on the same bridge, with as many pods already there.
    const floor = floorRun(path.join(podDir, 'floor'), n, false, 'routed');
    process.stdout.write(`kernel floor p50: attach ${percentile(floor.attachMs, 50).toFixed(2)} ms, detach ${percentile(floor.detachMs, 50).toFixed(2)} ms\n`);
    const inDaemon = attachMsFromLog(log.slice(mark));
    process.stdout.write(`daemon RSS with ${n} pods: ${rssMb(d.pid!).toFixed(0)} MB\n`);
    process.stdout.write(`attach p50: in-daemon ${percentile(inDaemon, 50).toFixed(2)} ms, gRPC ${percentile(grpcMs, 50).toFixed(2)} ms; detach (gRPC) p50 ${detach ? percentile(delMs, 50).toFixed(2) : '-'} ms\n`);
    for (const p of pods) removePinnedNetns(p.netns);
    process.stdout.write(`kernel floor CPU per attach: ${floor.attachCpuMs.user.toFixed(3)} ms user + ${floor.attachCpuMs.system.toFixed(3)} ms system\n`);
  } finally {
    c.close();
    d.kill('SIGINT');
    await new Promise((r) => d.once('exit', r));
    spawnSync('umount', ['-l', podDir]);
    fs.rmSync(podDir, { recursive: true, force: true });
  }
  if (!cpuProf) return;
  const file = fs.readdirSync(out).filter((f) => f.endsWith('.cpuprofile')).map((f) => path.join(out, f)).sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs)[0];
  const prof = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
  const top = selfTimes(prof);
  const total = top.reduce((s, x) => s + x.ms, 0);
  process.stdout.write(`profile ${file}: ${total.toFixed(0)} ms sampled; top self time:\n`);
  for (const t of top.slice(0, 30)) process.stdout.write(`  ${t.ms.toFixed(1).padStart(8)} ms  ${((100 * t.ms) / total).toFixed(1).padStart(5)} %  ${t.fn}\n`);
}

async function main(): Promise<void> {
  const o = new Command().option('--n <n>', 'pods', '300').option('--out <dir>', 'where the .cpuprofile goes', '/tmp/kni-profile').option('--no-detach', 'attach only (the pods go with their netns)').option('--no-cpu-prof', "time and CPU figures only, without the profiler's own cost").option('--inner <dir>').parse().opts<{ n: string; out: string; detach: boolean; cpuProf: boolean; inner?: string }>();
  if (o.cpuProf) fs.mkdirSync(o.out, { recursive: true });
  if (o.inner) return inner(Number(o.n), o.out, o.inner, o.detach, o.cpuProf);
  const name = `kp${process.pid.toString(36)}`;
  const dir = `/tmp/${name}`;
  fs.mkdirSync(dir, { recursive: true });
  try {
    const status = runInNodeNetns(name, __filename, ['--n', o.n, '--out', o.out, ...(o.detach ? [] : ['--no-detach']), ...(o.cpuProf ? [] : ['--no-cpu-prof']), '--inner', dir]);
    if (status !== 0) throw new Error(`profile run failed (exit ${status})`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`profile: ${(e as Error).message}`);
  process.exit(1);
});
