// npm run bench: kni against the CNI reference plugins, same machine, same run, same N.
//   node dist/bench/network-bench.js [--n 500] [--churn-seconds 60] [--scale 10,100,1000]
// Everything runs inside a throwaway netns standing in for the node (the bench re-executes
// itself there), so the daemon, kni-cni and the reference plugins all see the same node and
// the host's own networking is never touched. Results: a markdown table on stdout, the raw
// figures in bench/results/<time>.json (and latest.json), a chart in bench/results/latency.svg.
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import { Client, runtimeClient } from '../plugin/client/clients';
import { createPinnedNetns, ensureNetnsDir, removePinnedNetns } from '../plugin/netns/netns';
import { packageRoot } from '../plugin/server/protos';
import { goClientAddDel } from './go-client';
import { latencyChart } from './latency-chart';
import { floorRun } from './kernel-floor-run';
import { CpuMs, cpuMs, percentile, perPod, rssMb, Stats, stats } from './stats';
import { transportFloor, transportTable } from './transport-floor';

const ROOT = packageRoot();
const CNI_BIN = '/usr/lib/cni';
const SHIM = path.join(ROOT, 'dist/bin/kni-cni');
const BRIDGE_MAX_PORTS = 1023;

interface Opts { n: number; churnSeconds: number; scale: number[]; inner?: boolean; dir: string }

/** Runs op(0..n-1) with at most `concurrency` in flight; returns each op's ms and the wall ms. */
async function pool(n: number, concurrency: number, op: (i: number) => Promise<void>): Promise<{ ms: number[]; wall: number }> {
  const ms: number[] = new Array(n);
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, async () => {
    for (let i = next++; i < n; i = next++) {
      const s = performance.now();
      await op(i);
      ms[i] = performance.now() - s;
    }
  }));
  return { ms, wall: performance.now() - t0 };
}

/** Execs a CNI plugin exactly as a runtime does (libcni: its own environment plus CNI_*, config on stdin). */
function execPlugin(binary: string, env: Record<string, string>, conf: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn(binary, [], { env: { ...process.env, CNI_PATH: CNI_BIN, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (out += b));
    p.on('error', reject);
    p.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${path.basename(binary)} ${env.CNI_COMMAND} ${env.CNI_CONTAINERID}: exit ${code}: ${out}`))));
    p.stdin.end(conf);
  });
}

/** One way of attaching and detaching a pod whose netns the runtime already made. */
interface Path {
  name: string;
  add(id: string, netns: string): Promise<void>;
  del(id: string, netns: string): Promise<void>;
}

class Bench {
  private daemon?: ChildProcess;
  private daemonOut = '';
  private client!: Client;
  private podDir: string;
  private socket: string;
  private cniSocket: string;
  private seq = 0;

  constructor(private readonly o: Opts) {
    this.podDir = path.join('/run', `${path.basename(o.dir)}-netns`);
    this.socket = path.join(o.dir, 'kni.sock');
    this.cniSocket = path.join(o.dir, 'cni.sock');
  }

  async startDaemon(): Promise<void> {
    const config = path.join(this.o.dir, 'kni.json');
    fs.writeFileSync(config, JSON.stringify({
      ranges: ['10.128.0.0/16', 'fd00:128::/64'], netnsDir: this.podDir, cni: { socket: this.cniSocket },
    }));
    this.daemon = spawn(process.execPath, [path.join(ROOT, 'dist/plugin/main.js'), '--socket', this.socket, '--state-dir', path.join(this.o.dir, 'state'), '--config', config], { stdio: ['ignore', 'pipe', 'inherit'] });
    this.daemon.stdout!.on('data', (b) => (this.daemonOut += b));
    this.client = runtimeClient(this.socket);
    for (let i = 0; i < 300; i++) {
      try {
        if ((await this.client.GetNode({}, 1000)).ready) return;
      } catch {
        // not serving yet
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`kni-runtime did not start:\n${this.daemonOut}`);
  }

  kniClient(): Client {
    return this.client;
  }

  stop(): void {
    this.client?.close();
    this.daemon?.kill('SIGKILL');
    if (fs.existsSync(this.podDir)) {
      for (const f of fs.readdirSync(this.podDir, { recursive: true }) as string[]) {
        if (!fs.statSync(path.join(this.podDir, f)).isDirectory()) removePinnedNetns(path.join(this.podDir, f));
      }
      spawnSync('umount', ['-l', this.podDir]);
      fs.rmSync(this.podDir, { recursive: true, force: true });
    }
  }

  /** In-daemon attach times (ms) from the daemon's own log lines since `mark`. */
  inDaemonAttachMs(mark: number): number[] {
    return this.daemonOut.slice(mark).split('\n').filter((l) => l.includes('"msg":"attach"')).map((l) => JSON.parse(l).ms as number);
  }

  newPods(n: number): { id: string; netns: string }[] {
    ensureNetnsDir(this.podDir);
    return Array.from({ length: n }, () => {
      const id = `bench${(this.seq++).toString().padStart(6, '0')}${'0'.repeat(10)}`;
      return { id, netns: createPinnedNetns(this.podDir, id) };
    });
  }

  dropPods(pods: { netns: string }[]): void {
    for (const p of pods) removePinnedNetns(p.netns);
  }

  paths(): Path[] {
    const cniEnv = (cmd: string, id: string, netns: string) => ({ CNI_COMMAND: cmd, CNI_CONTAINERID: id, CNI_NETNS: netns, CNI_IFNAME: 'eth0' });
    const kniConf = JSON.stringify({ cniVersion: '1.0.0', name: 'kni', type: 'kni-cni', socket: this.cniSocket });
    const loConf = JSON.stringify({ cniVersion: '1.0.0', name: 'lo', type: 'loopback' });
    const bridgeConf = JSON.stringify({
      cniVersion: '1.0.0', name: 'ref', type: 'bridge', bridge: 'cni0', isGateway: true, ipMasq: true, hairpinMode: true, mtu: 1500,
      ipam: { type: 'host-local', ranges: [[{ subnet: '10.129.0.0/16' }], [{ subnet: 'fd00:129::/64' }]], routes: [{ dst: '0.0.0.0/0' }, { dst: '::/0' }], dataDir: path.join(this.o.dir, 'host-local') },
    });
    return [
      {
        name: 'kni gRPC',
        add: async (id, netns) => void (await this.client.Attach({ sandbox_id: id, netns_path: netns })),
        // As a runtime stopping the sandbox: the bench removes the netns right after.
        del: async (id) => void (await this.client.Detach({ sandbox_id: id, netns_ending: true })),
      },
      {
        name: 'kni-cni (exec)',
        add: (id, netns) => execPlugin(SHIM, cniEnv('ADD', id, netns), kniConf),
        del: (id, netns) => execPlugin(SHIM, cniEnv('DEL', id, netns), kniConf),
      },
      {
        name: 'bridge + host-local + loopback (exec)',
        add: async (id, netns) => {
          await execPlugin(`${CNI_BIN}/loopback`, cniEnv('ADD', id, netns), loConf);
          await execPlugin(`${CNI_BIN}/bridge`, cniEnv('ADD', id, netns), bridgeConf);
        },
        del: async (id, netns) => {
          await execPlugin(`${CNI_BIN}/bridge`, cniEnv('DEL', id, netns), bridgeConf);
          await execPlugin(`${CNI_BIN}/loopback`, cniEnv('DEL', id, netns), loConf);
        },
      },
    ];
  }

  /** N pods attached with the given concurrency, then detached the same way. */
  async addDel(p: Path, concurrency: number): Promise<{ add: Stats; del: Stats; inDaemonAdd?: Stats; daemonCpuPerAdd?: CpuMs }> {
    const pods = this.newPods(this.o.n);
    try {
      const mark = this.daemonOut.length;
      const cpu0 = cpuMs(this.daemon!.pid!);
      const add = await pool(pods.length, concurrency, (i) => p.add(pods[i].id, pods[i].netns));
      const daemonCpuPerAdd = perPod(cpu0, cpuMs(this.daemon!.pid!), pods.length);
      const inDaemon = p.name.startsWith('kni') ? this.inDaemonAttachMs(mark) : [];
      const del = await pool(pods.length, concurrency, (i) => p.del(pods[i].id, pods[i].netns));
      return { add: stats(add.ms, add.wall), del: stats(del.ms, del.wall), ...(inDaemon.length ? { inDaemonAdd: stats(inDaemon, add.wall), daemonCpuPerAdd } : {}) };
    } finally {
      this.dropPods(pods);
    }
  }

  /**
   * Attaches and detaches pods unmeasured first: a node's daemon runs for days, so the figures
   * are of a warm one (V8 has compiled the attach path), not of its first minute.
   */
  async warmUp(n: number): Promise<void> {
    const pods = this.newPods(n);
    try {
      for (const p of pods) {
        await this.client.Attach({ sandbox_id: p.id, netns_path: p.netns });
        await this.client.Detach({ sandbox_id: p.id, netns_ending: true });
      }
    } finally {
      this.dropPods(pods);
    }
  }

  /** addDel through kni's gRPC API from a Go client (bench/go-client.ts). */
  async addDelGo(concurrency: number): Promise<{ add: Stats; del: Stats; inDaemonAdd: Stats }> {
    const pods = this.newPods(this.o.n);
    try {
      const mark = this.daemonOut.length;
      const r = await goClientAddDel(this.socket, pods, concurrency, this.o.dir);
      return { add: stats(r.attachMs, r.attachWallMs), del: stats(r.detachMs, r.detachWallMs), inDaemonAdd: stats(this.inDaemonAttachMs(mark), r.attachWallMs) };
    } finally {
      this.dropPods(pods);
    }
  }

  /**
   * The kernel floor (bench/kernel-floor.c): the same netlink work as one kni attach and one
   * detach, in C, on kni's own bridge, for n pods in netns the bench made (as a runtime does).
   */
  floor(n: number): { attach: Stats; detach: Stats; groupDeleteMs: number; attachCpuMs: CpuMs } {
    const t0 = performance.now();
    const x = floorRun(path.join(this.podDir, 'floor'), n);
    const wall = performance.now() - t0;
    return { attach: stats(x.attachMs, wall), detach: stats(x.detachMs, wall), groupDeleteMs: x.groupDeleteMs, attachCpuMs: x.attachCpuMs };
  }

  /**
   * In-daemon attach against the floor, in alternating blocks (kni's pods detached before the
   * floor's block, so both see the same bridge): on a shared machine the two phases of a
   * comparison drift apart by 30–50 % minutes apart, and alternating cancels that drift.
   */
  async versusFloor(blocks: number, perBlock: number): Promise<{ inDaemon: Stats; grpc: Stats; floor: Stats }> {
    const inDaemon: number[] = [];
    const grpc: number[] = [];
    const floor: number[] = [];
    const kept: { netns: string }[] = [];
    const floorRuns: (() => void)[] = [];
    const t0 = performance.now();
    try {
      for (let b = 0; b < blocks; b++) {
        const pods = this.newPods(perBlock);
        kept.push(...pods);
        const mark = this.daemonOut.length;
        for (const p of pods) {
          const s = performance.now();
          await this.client.Attach({ sandbox_id: p.id, netns_path: p.netns });
          grpc.push(performance.now() - s);
        }
        inDaemon.push(...this.inDaemonAttachMs(mark));
        // Plain detaches: the veths are gone when they answer, the netns stay (see floorRun).
        for (const p of pods) await this.client.Detach({ sandbox_id: p.id });
        const f = floorRun(path.join(this.podDir, `versus${b}`), perBlock, true);
        floorRuns.push(f.drop);
        floor.push(...f.attachMs);
      }
    } finally {
      this.dropPods(kept);
      for (const drop of floorRuns) drop();
    }
    const wall = performance.now() - t0;
    return { inDaemon: stats(inDaemon, wall), grpc: stats(grpc, wall), floor: stats(floor, wall) };
  }

  /**
   * Attach latency (gRPC and in-daemon), daemon RSS and the kernel floor's attach with `level`
   * pods already attached: what grows with the bridge's ports, and whose it is.
   */
  async scale(): Promise<{ pods: number; attach: Stats; inDaemon: Stats; floor: Stats; rssMb: number }[]> {
    const out = [];
    const held: { id: string; netns: string }[] = [];
    try {
      for (const level of this.o.scale) {
        const more = this.newPods(level - held.length);
        await pool(more.length, 16, async (i) => void (await this.client.Attach({ sandbox_id: more[i].id, netns_path: more[i].netns })));
        held.push(...more);
        const probe = this.newPods(100);
        const ms: number[] = [];
        const mark = this.daemonOut.length;
        const t0 = performance.now();
        for (const p of probe) {
          const s = performance.now();
          await this.client.Attach({ sandbox_id: p.id, netns_path: p.netns });
          ms.push(performance.now() - s);
          await this.client.Detach({ sandbox_id: p.id });
        }
        const wall = performance.now() - t0;
        // The floor keeps its veths (retired) until its group delete, and a bridge takes at most
        // 1023 ports (the kernel answers EXFULL): at 1000 pods only ≈ 20 fit.
        // The probe's netns go after the floor: the kernel dismantles dropped netns in the
        // background, under locks an attach needs.
        const floor = this.floor(Math.max(5, Math.min(probe.length, BRIDGE_MAX_PORTS - 3 - level))).attach;
        this.dropPods(probe);
        out.push({ pods: level, attach: stats(ms, wall), inDaemon: stats(this.inDaemonAttachMs(mark), wall), floor, rssMb: rssMb(this.daemon!.pid!) });
        process.stderr.write(`  scale ${level}: attach p50 ${percentile(ms, 50).toFixed(2)} ms, floor ${floor.p50.toFixed(2)} ms, RSS ${out.at(-1)!.rssMb.toFixed(0)} MB\n`);
      }
    } finally {
      await pool(held.length, 16, async (i) => void (await this.client.Detach({ sandbox_id: held[i].id })));
      this.dropPods(held);
    }
    return out;
  }

  /** attach + detach cycles per second over churnSeconds, 16 at once; RSS before and after. */
  async churn(): Promise<{ seconds: number; cycles: number; cyclesPerSecond: number; rssStartMb: number; rssEndMb: number }> {
    const rssStartMb = rssMb(this.daemon!.pid!);
    const end = performance.now() + this.o.churnSeconds * 1000;
    let cycles = 0;
    await Promise.all(Array.from({ length: 16 }, async () => {
      while (performance.now() < end) {
        const [p] = this.newPods(1);
        try {
          await this.client.Attach({ sandbox_id: p.id, netns_path: p.netns });
          await this.client.Detach({ sandbox_id: p.id, netns_ending: true });
          cycles++;
        } finally {
          this.dropPods([p]);
        }
      }
    }));
    return { seconds: this.o.churnSeconds, cycles, cyclesPerSecond: cycles / this.o.churnSeconds, rssStartMb, rssEndMb: rssMb(this.daemon!.pid!) };
  }
}

const GO_PATH = 'kni gRPC, Go client';
const f2 = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));

async function inner(o: Opts): Promise<void> {
  const b = new Bench(o);
  try {
    await b.startDaemon();
    process.stderr.write('  warming the daemon up (300 attach + detach, not measured) ...\n');
    await b.warmUp(300);
    const paths = b.paths();
    const rows: { path: string; concurrency: number; add: Stats; del: Stats; inDaemonAdd?: Stats; daemonCpuPerAdd?: CpuMs }[] = [];
    for (const concurrency of [1, 8, 16]) {
      for (const p of paths) {
        process.stderr.write(`  ${p.name}, ${concurrency} at once, N = ${o.n} ...\n`);
        rows.push({ path: p.name, concurrency, ...(await b.addDel(p, concurrency)) });
      }
      process.stderr.write(`  ${GO_PATH}, ${concurrency} at once, N = ${o.n} ...\n`);
      rows.push({ path: GO_PATH, concurrency, ...(await b.addDelGo(concurrency)) });
    }
    process.stderr.write(`  kernel floor (C), N = ${o.n} ...\n`);
    const floor = b.floor(o.n);
    process.stderr.write('  in-daemon attach and the floor, alternating blocks of 50 ...\n');
    const versus = await b.versusFloor(8, 50);
    process.stderr.write('  scale ...\n');
    const scale = await b.scale();
    process.stderr.write(`  churn for ${o.churnSeconds} s ...\n`);
    const churn = await b.churn();
    process.stderr.write('  transport floor ...\n');
    const transport = await transportFloor(400, b.kniClient());

    const ref = (c: number) => rows.find((r) => r.concurrency === c && r.path.startsWith('bridge'))!;
    const lines: string[] = [];
    lines.push(`\n## kni vs CNI reference plugins (N = ${o.n} per cell, ms per pod)\n`);
    lines.push(`${os.cpus().length} vCPU, kernel ${os.release()}, Node ${process.version}; reference: Debian containernetworking-plugins bridge + host-local (ipMasq on, dual-stack) + loopback.\n`);
    lines.push('| path | at once | ADD p50 / p90 / p99 | DEL p50 / p90 / p99 | ADD/s | reference ÷ this, ADD p50 / p99 | DEL p50 / p99 |');
    lines.push('|---|---|---|---|---|---|---|');
    for (const r of rows) {
      const x = ref(r.concurrency);
      lines.push(`| ${r.path} | ${r.concurrency} | ${f2(r.add.p50)} / ${f2(r.add.p90)} / ${f2(r.add.p99)} | ${f2(r.del.p50)} / ${f2(r.del.p90)} / ${f2(r.del.p99)} | ${r.add.opsPerSecond.toFixed(0)} | ${(x.add.p50 / r.add.p50).toFixed(1)}× / ${(x.add.p99 / r.add.p99).toFixed(1)}× | ${(x.del.p50 / r.del.p50).toFixed(1)}× / ${(x.del.p99 / r.del.p99).toFixed(1)}× |`);
    }
    const inD = rows.find((r) => r.concurrency === 1 && r.path === 'kni gRPC')!.inDaemonAdd!;
    const go1 = rows.find((r) => r.concurrency === 1 && r.path === GO_PATH)!;
    lines.push(`\nIn-daemon attach (from the daemon's own log, sequential): p50 ${f2(inD.p50)} / p90 ${f2(inD.p90)} / p99 ${f2(inD.p99)} ms.\n`);
    const grpc1 = rows.find((r) => r.concurrency === 1 && r.path === 'kni gRPC')!;
    const grpc16 = rows.find((r) => r.concurrency === 16 && r.path === 'kni gRPC')!;
    lines.push(`### kni ÷ kernel floor (bench/kernel-floor.c: the same netlink messages in C, same bridge, same N, sequential)\n`);
    lines.push('| | kni p50 / p99 (ms) | floor p50 / p99 (ms) | kni ÷ floor, p50 |\n|---|---|---|---|');
    lines.push(`| attach, in-daemon | ${f2(inD.p50)} / ${f2(inD.p99)} | ${f2(floor.attach.p50)} / ${f2(floor.attach.p99)} | ${(inD.p50 / floor.attach.p50).toFixed(2)}× |`);
    lines.push(`| attach, gRPC | ${f2(grpc1.add.p50)} / ${f2(grpc1.add.p99)} | ${f2(floor.attach.p50)} / ${f2(floor.attach.p99)} | ${(grpc1.add.p50 / floor.attach.p50).toFixed(2)}× |`);
    lines.push(`| attach, gRPC from Go (in-daemon in that run ${f2(go1.inDaemonAdd!.p50)}) | ${f2(go1.add.p50)} / ${f2(go1.add.p99)} | ${f2(floor.attach.p50)} / ${f2(floor.attach.p99)} | ${(go1.add.p50 / floor.attach.p50).toFixed(2)}× |`);
    lines.push(`| detach, gRPC (the runtime made the netns) | ${f2(grpc1.del.p50)} / ${f2(grpc1.del.p99)} | ${f2(floor.detach.p50)} / ${f2(floor.detach.p99)} | ${(grpc1.del.p50 / floor.detach.p50).toFixed(2)}× |\n`);
    lines.push(`Alternating blocks (8 × 50 pods, kni's then the floor's, on the same bridge): in-daemon attach p50 ${f2(versus.inDaemon.p50)} ms, the floor ${f2(versus.floor.p50)} ms: ${(versus.inDaemon.p50 / versus.floor.p50).toFixed(2)}×; gRPC attach p50 ${f2(versus.grpc.p50)} ms.\n`);
    const cpu = grpc1.daemonCpuPerAdd!;
    lines.push(`CPU per attach (mean, sequential; the daemon's all threads, from /proc): kni daemon ${f2(cpu.user)} ms user (JavaScript, V8, libuv) + ${f2(cpu.system)} ms system (the kernel: netlink, the socket, the event loop); the floor ${f2(floor.attachCpuMs.user)} user + ${f2(floor.attachCpuMs.system)} system.\n`);
    lines.push(`The floor's detach is kni's when the runtime tears the netns down next: the host veth retired in one request; the ${o.n} retired veths were then deleted in one request of ${f2(floor.groupDeleteMs)} ms (kni's reaper thread does that after the answers).\n`);
    lines.push('| pods already attached | gRPC attach p50 / p90 / p99 (ms) | in-daemon p50 | kernel floor p50 | daemon RSS (MB) |\n|---|---|---|---|---|');
    for (const s of scale) lines.push(`| ${s.pods} | ${f2(s.attach.p50)} / ${f2(s.attach.p90)} / ${f2(s.attach.p99)} | ${f2(s.inDaemon.p50)} | ${f2(s.floor.p50)} | ${s.rssMb.toFixed(0)} |`);
    const grow = (pick: (s: (typeof scale)[number]) => Stats) => (pick(scale.at(-1)!).p50 / pick(scale[0]).p50).toFixed(2);
    lines.push(`\n${scale.at(-1)!.pods} pods ÷ ${scale[0].pods}, p50: gRPC ${grow((s) => s.attach)}×, in-daemon ${grow((s) => s.inDaemon)}×, kernel floor ${grow((s) => s.floor)}×.\n`);
    lines.push(`\n### What a call costs before kni does anything (bench/transport-floor.ts)\n\n${transportTable(transport)}\n`);
    lines.push(`\nChurn: ${churn.cycles} attach+detach cycles in ${churn.seconds} s = ${churn.cyclesPerSecond.toFixed(0)}/s (16 at once); daemon RSS ${churn.rssStartMb.toFixed(0)} → ${churn.rssEndMb.toFixed(0)} MB.\n`);

    const shim1 = rows.find((r) => r.concurrency === 1 && r.path.startsWith('kni-cni'))!;
    const http2Idle = transport.find((t) => t.path.startsWith("Node's HTTP/2"))!.afterIdle;
    const first = scale[0];
    const last = scale.at(-1)!;
    const targets = [
      { target: 'in-daemon attach p50 ≤ 1.5× the kernel floor (alternating blocks)', value: `${(versus.inDaemon.p50 / versus.floor.p50).toFixed(2)}× (${(inD.p50 / floor.attach.p50).toFixed(2)}× phases apart)`, met: versus.inDaemon.p50 <= 1.5 * versus.floor.p50 },
      { target: 'gRPC Attach p50 ≤ in-daemon p50 + 0.3 ms', value: `+${f2(grpc1.add.p50 - inD.p50)} ms (a no-op call over Node's HTTP/2 alone: ${f2(http2Idle)} ms after idle)`, met: grpc1.add.p50 <= inD.p50 + 0.3 },
      { target: '… the same from a Go client (grpc-go, as containerd calls)', value: `+${f2(go1.add.p50 - go1.inDaemonAdd!.p50)} ms`, met: go1.add.p50 <= go1.inDaemonAdd!.p50 + 0.3 },
      { target: '16 at once ≥ 1.5× the attaches/s of one at a time', value: `${(grpc16.add.opsPerSecond / grpc1.add.opsPerSecond).toFixed(2)}×`, met: grpc16.add.opsPerSecond >= 1.5 * grpc1.add.opsPerSecond },
      { target: 'DEL p50 ≤ 2 ms (netns made by the runtime)', value: `${f2(grpc1.del.p50)} ms`, met: grpc1.del.p50 <= 2 },
      { target: 'shim ADD ≥ 3× faster than bridge + host-local (p50, sequential)', value: `${(ref(1).add.p50 / shim1.add.p50).toFixed(1)}×`, met: ref(1).add.p50 / shim1.add.p50 >= 3 },
      { target: `attach at ${last.pods} pods ≤ 1.2× attach at ${first.pods} (p50)`, value: `${(last.attach.p50 / first.attach.p50).toFixed(2)}×`, met: last.attach.p50 <= 1.2 * first.attach.p50 },
      { target: `daemon RSS ≤ 150 MB at ${last.pods} pods`, value: `${last.rssMb.toFixed(0)} MB`, met: last.rssMb <= 150 },
    ];
    lines.push('| target | this run | met |\n|---|---|---|');
    for (const t of targets) lines.push(`| ${t.target} | ${t.value} | ${t.met ? 'yes' : '**no**'} |`);
    process.stdout.write(`${lines.join('\n')}\n`);

    const results = path.join(ROOT, 'bench/results');
    fs.mkdirSync(results, { recursive: true });
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    const json = JSON.stringify({ date: new Date().toISOString(), machine: { cpus: os.cpus().length, kernel: os.release(), node: process.version }, n: o.n, rows, floor, versus, scale, churn, transport, targets }, null, 2);
    fs.writeFileSync(path.join(results, `${stamp}.json`), json);
    fs.writeFileSync(path.join(results, 'latest.json'), json);
    fs.writeFileSync(path.join(results, 'latency.svg'), latencyChart(rows, `kni vs CNI reference plugins, N = ${o.n} (ms per pod, log scale)`));
    process.stdout.write(`\nraw figures: bench/results/${stamp}.json (and latest.json); chart: bench/results/latency.svg\n`);
  } finally {
    b.stop();
  }
}

async function main(): Promise<void> {
  const program = new Command()
    .option('--n <n>', 'pods per cell', '500')
    .option('--churn-seconds <s>', 'churn duration', '60')
    .option('--scale <list>', 'pod counts already attached for the scale test', '10,100,1000')
    .option('--inner <dir>', '(internal) run inside the node netns with this work dir')
    .parse();
  const raw = program.opts<{ n: string; churnSeconds: string; scale: string; inner?: string }>();
  const o: Opts = { n: Number(raw.n), churnSeconds: Number(raw.churnSeconds), scale: raw.scale.split(',').map(Number), dir: raw.inner ?? '' };
  if (!(o.n >= 10 && o.n <= 5000) || !(o.churnSeconds > 0) || o.scale.some((x) => !(x >= 1 && x <= 5000))) throw new Error('--n must be 10..5000, --churn-seconds > 0, --scale counts 1..5000');
  if (raw.inner) return inner(o);
  if (process.getuid?.() !== 0) throw new Error('the benchmark needs root (network namespaces, links)');
  for (const bin of [SHIM, `${CNI_BIN}/bridge`, `${CNI_BIN}/host-local`, `${CNI_BIN}/loopback`]) {
    if (!fs.existsSync(bin)) throw new Error(`${bin} is missing: run bash hack/setup.sh`);
  }
  const name = `kb${process.pid.toString(36)}`;
  const dir = `/tmp/${name}`;
  fs.mkdirSync(dir, { recursive: true });
  spawnSync('ip', ['netns', 'add', `${name}-node`], { stdio: 'inherit' });
  try {
    spawnSync('ip', ['-n', `${name}-node`, 'link', 'set', 'lo', 'up']);
    const r = spawnSync('nsenter', [`--net=/run/netns/${name}-node`, process.execPath, __filename, '--n', raw.n, '--churn-seconds', raw.churnSeconds, '--scale', raw.scale, '--inner', dir], { stdio: 'inherit' });
    if (r.status !== 0) throw new Error(`benchmark failed (exit ${r.status})`);
  } finally {
    spawnSync('ip', ['netns', 'del', `${name}-node`]);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`bench: ${(e as Error).message}`);
  process.exit(1);
});
