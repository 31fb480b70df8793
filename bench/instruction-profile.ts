// Instructions, not seconds: the daemon under valgrind's callgrind, a Go client attaching and
// detaching pods (as containerd calls), and the instructions the daemon's main thread runs per
// attach + detach, round after round, with the functions they go to (kni's JavaScript named
// from V8's perf map). On this shared 2-vCPU machine whole-daemon timings move by ±30 % from
// one run to the next. Once the daemon is warm these totals move by 5–10 % between rounds, and
// by up to 60 % while V8 runs a deoptimized hot function in baseline code until it is optimized
// again (longer under valgrind, which runs the compiler's thread in turn with the main one).
// One function's count moves by a few % at most: a change worth a few microseconds shows in
// it. The kernel's own work is not counted: valgrind
// sees user space only. Times under valgrind are ~30× the real ones.
import { ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { program } from 'commander';
import { goClientAddDel } from './go-client';
import { guardRunNetnsMount } from './run-netns-mount';
import { percentile } from './stats';

const ROOT = path.join(__dirname, '../..');

interface Opts { cycles: number; warm: number; rounds: number; top: number; keep?: string }

/** Throws with the command's stderr in its message. */
const sh = (cmd: string, args: string[]): void => void execFileSync(cmd, args, { stdio: 'pipe' });

/** JIT code's address ranges and names, as V8 writes them with --perf-basic-prof. */
function perfMap(pid: number): { start: number; end: number; name: string }[] {
  const file = `/tmp/perf-${pid}.map`;
  if (!fs.existsSync(file)) return [];
  return fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => {
    const [start, size, ...name] = l.split(' ');
    const s = parseInt(start, 16);
    return { start: s, end: s + parseInt(size, 16), name: name.join(' ') };
  });
}

/** Self cost per function of one callgrind dump, from callgrind_annotate; JIT code named from the perf map (the latest code at that address). */
function selfCosts(file: string, map: ReturnType<typeof perfMap>): { total: number; fns: Map<string, number> } {
  const r = spawnSync('callgrind_annotate', ['--threshold=100', file], { encoding: 'utf8', maxBuffer: 256 << 20 });
  if (r.status !== 0) throw new Error(`callgrind_annotate ${file}: ${r.stderr}`);
  const total = Number(/^([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS/m.exec(r.stdout)?.[1].replace(/,/g, '') ?? NaN);
  const fns = new Map<string, number>();
  for (const line of r.stdout.split('\n')) {
    const m = /^\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*)$/.exec(line);
    if (!m || m[2] === 'PROGRAM TOTALS') continue;
    const ir = Number(m[1].replace(/,/g, ''));
    if (ir >= total * 0.999) continue; // the frames live at the dump (main, the event loop), not self cost
    let name = m[2];
    const jit = /^\?\?\?:0x([0-9a-f]+) \[\?\?\?\]$/.exec(name);
    if (jit) {
      const at = parseInt(jit[1], 16);
      let hit: (typeof map)[number] | undefined;
      for (let i = map.length - 1; i >= 0 && !hit; i--) if (at >= map[i].start && at < map[i].end) hit = map[i];
      name = hit ? `JS ${hit.name}` : 'JS (code no longer mapped)';
    } else {
      name = name.replace(/^\?\?\?:/, '').replace(/^\.\/\S+?:/, '').replace(/\(anonymous namespace\)/g, '{anon}').replace(/\(.*$/, '()');
    }
    fns.set(name, (fns.get(name) ?? 0) + ir);
  }
  return { total, fns };
}

async function waitFor(file: string, ms: number, daemon: ChildProcess): Promise<void> {
  const until = Date.now() + ms;
  while (!fs.existsSync(file)) {
    if (daemon.exitCode !== null) throw new Error(`the daemon under valgrind exited (${daemon.exitCode}) before serving`);
    if (Date.now() > until) throw new Error(`the daemon under valgrind did not serve ${file} within ${ms / 1000} s`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function run(o: Opts, name: string, dir: string): Promise<void> {
  const node = `${name}-node`;
  const socket = path.join(dir, 'kni.sock');
  fs.writeFileSync(path.join(dir, 'kni.json'), JSON.stringify({ ranges: ['10.139.0.0/16', 'fd00:139::/64'], netnsDir: path.join(dir, 'pods'), cni: { socket: path.join(dir, 'cni.sock') }, podLink: 'routed' }));
  const daemon = spawn('nsenter', [`--net=/run/netns/${node}`, 'valgrind', '--tool=callgrind', '--separate-threads=yes', '--smc-check=all-non-file',
    `--callgrind-out-file=${dir}/cg.out`, process.execPath, '--perf-basic-prof', path.join(ROOT, 'dist/plugin/main.js'),
    '--socket', socket, '--state-dir', path.join(dir, 'state'), '--config', path.join(dir, 'kni.json'), '--log-level', 'warn'], { stdio: ['ignore', 'ignore', fs.openSync(path.join(dir, 'valgrind.log'), 'w')] });
  const netns = Array.from({ length: o.cycles }, (_, i) => `${name}-p${i}`);
  const pods = netns.map((n, i) => ({ id: `${name}-sb${i}`, netns: `/run/netns/${n}` }));
  const dropPods = () => netns.forEach((n) => spawnSync('ip', ['netns', 'del', n], { stdio: 'ignore' }));
  /** One round: the pods' netns made as a runtime makes them, the Go client's attach + detach of each between before and after, the netns gone. */
  const round = async (before = () => {}, after = () => {}) => {
    netns.forEach((n) => sh('ip', ['netns', 'add', n]));
    try {
      before();
      await goClientAddDel(socket, pods, 1, dir);
      after();
    } finally {
      dropPods();
    }
  };
  try {
    await waitFor(socket, 180_000, daemon);
    const pid = daemon.pid!;
    process.stderr.write(`  warming up: ${o.warm} rounds of ${o.cycles} attach + detach under callgrind ...\n`);
    for (let i = 0; i < o.warm; i++) await round();
    const rounds: { total: number; fns: Map<string, number> }[] = [];
    for (let i = 1; i <= o.rounds; i++) {
      await round(() => sh('callgrind_control', ['--zero', String(pid)]), () => sh('callgrind_control', [`--dump=round${i}`, String(pid)]));
      // --separate-threads: thread 1 is the main thread, where the event loop and all of kni's JavaScript run.
      const main = path.join(dir, `cg.out.${i}-01`);
      rounds.push(selfCosts(main, perfMap(pid)));
      process.stderr.write(`  round ${i}: ${(rounds.at(-1)!.total / o.cycles / 1000).toFixed(1)}k instructions per attach + detach on the main thread\n`);
    }
    const per = rounds.map((r) => r.total / o.cycles);
    const sum = new Map<string, number>();
    for (const r of rounds) for (const [k, v] of r.fns) sum.set(k, (sum.get(k) ?? 0) + v);
    const all = o.cycles * o.rounds;
    const lines = [
      `main thread, instructions per attach + detach (Go client, one at a time, ${o.cycles} a round, after ${o.warm * o.cycles} to warm up):`,
      `  rounds: ${per.map((x) => `${(x / 1000).toFixed(1)}k`).join(', ')}; least ${(Math.min(...per) / 1000).toFixed(1)}k (the fewest deoptimized functions), median ${(percentile(per, 50) / 1000).toFixed(1)}k`,
      '',
      `| instructions per attach + detach | share | function (self cost, all ${o.rounds} rounds) |`,
      '|---|---|---|',
      ...[...sum].sort((a, b) => b[1] - a[1]).slice(0, o.top).map(([k, v]) => `| ${(v / all / 1000).toFixed(1)}k | ${((v / all / percentile(per, 50)) * 100).toFixed(1)} % | ${k.replace(/\|/g, '\\|').slice(0, 140)} |`),
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    daemon.kill('SIGTERM');
    await new Promise((r) => (daemon.exitCode !== null ? r(null) : daemon.once('exit', r)));
    const map = `/tmp/perf-${daemon.pid}.map`;
    if (o.keep) {
      fs.mkdirSync(o.keep, { recursive: true });
      for (const f of fs.readdirSync(dir).filter((f) => f.startsWith('cg.out.'))) fs.copyFileSync(path.join(dir, f), path.join(o.keep, f));
      if (fs.existsSync(map)) fs.copyFileSync(map, path.join(o.keep, 'perf.map'));
    }
    fs.rmSync(map, { force: true });
    dropPods();
    spawnSync('umount', ['-l', path.join(dir, 'pods')], { stdio: 'ignore' });
  }
}

async function main(): Promise<void> {
  program
    .option('--cycles <n>', 'attach + detach cycles a round', '200')
    .option('--warm <n>', 'rounds to warm up first (V8 still tiers up the attach path for ~3,000 cycles)', '20')
    .option('--rounds <n>', 'rounds counted', '6')
    .option('--top <n>', 'functions listed', '30')
    .option('--keep <dir>', 'keep the callgrind dumps (cg.out.<round>-<thread>) and the perf map there')
    .parse();
  const raw = program.opts<Record<keyof Opts, string>>();
  const o: Opts = { cycles: Number(raw.cycles), warm: Number(raw.warm), rounds: Number(raw.rounds), top: Number(raw.top), keep: raw.keep };
  if (!(o.cycles >= 10 && o.cycles <= 2000) || !(o.warm >= 0) || !(o.rounds >= 1) || !(o.top >= 1)) throw new Error('--cycles must be 10..2000, --warm ≥ 0, --rounds ≥ 1, --top ≥ 1');
  if (process.getuid?.() !== 0) throw new Error('needs root (network namespaces, links)');
  for (const tool of ['valgrind', 'callgrind_control', 'callgrind_annotate']) {
    if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) throw new Error(`${tool} is missing: apt-get install valgrind`);
  }
  const name = `ki${process.pid.toString(36)}`;
  const dir = `/tmp/${name}`;
  fs.mkdirSync(path.join(dir, 'pods'), { recursive: true });
  const releaseRunNetns = guardRunNetnsMount();
  sh('ip', ['netns', 'add', `${name}-node`]);
  try {
    sh('ip', ['-n', `${name}-node`, 'link', 'set', 'lo', 'up']);
    await run(o, name, dir);
  } finally {
    spawnSync('ip', ['netns', 'del', `${name}-node`]);
    releaseRunNetns();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`instruction profile: ${(e as Error).message}`);
  process.exit(1);
});
