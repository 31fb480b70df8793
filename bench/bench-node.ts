// The bench's node: kni-runtime started on a throwaway node netns, pods made as a runtime makes
// them, and each measurement (a cell of N pods, the warm-up, the kernel floor, the alternating
// blocks, the scale steps, the churn) as one method. bench/network-bench.ts runs them in order
// and reports.
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client, kniClient, runtimeClient } from '../plugin/client/clients';
import type { PodWiring } from '../plugin/core/config';
import { hostVethName } from '../plugin/core/network-runtime';
import { linkByName } from '../plugin/netlink/link';
import { NetlinkSocket } from '../plugin/netlink/socket';
import { createPinnedNetns, ensureNetnsDir, removePinnedNetns } from '../plugin/netns/netns';
import { packageRoot } from '../plugin/server/protos';
import { GRPC_PATH, type BenchRow, type ConcurrencyBlocks } from './bench-report';
import { benchPaths, Path } from './bench-paths';
import { goClientAddDel } from './go-client';
import { floorRun } from './kernel-floor-run';
import { CpuMs, cpuMs, percentile, perPod, pool, rssMb, Stats, stats } from './stats';
import { attachMsFromLog, readSteps, stepMeans } from './step-times';

const ROOT = packageRoot();
const BRIDGE_MAX_PORTS = 1023;
/** A fresh daemon's first attaches, reported apart from the warm cells. */
const FRESH = 10;
/** The daemon's metrics endpoint, inside the throwaway node netns (nobody else listens there). */
const METRICS = '127.0.0.1:9464';

export interface BenchOpts { n: number; churnSeconds: number; scale: number[]; podLink: PodWiring; dir: string }

/** Links in the current netns (the node's, where the host veths are). */
const linkCount = (): number => spawnSync('ip', ['-o', 'link', 'show'], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean).length;

/**
 * A plain Detach answers before the kernel deletes the pod's veth (the reaper deletes it after
 * the answer). The alternating blocks and the scale probe wait here until the veth is
 * unlisted. The kernel's delete goes on for 10–20 ms after that; waiting it out too did not
 * change the scale probe's attach.
 */
async function vethsGone(sock: NetlinkSocket, ids: string[]): Promise<void> {
  for (const id of ids) for (let i = 0; i < 5000 && linkByName(sock, hostVethName(id, 'eth0')); i++) await new Promise((r) => setTimeout(r, 1));
}

export class Bench {
  private daemon?: ChildProcess;
  private daemonOut = '';
  private client!: Client;
  private podDir: string;
  private socket: string;
  private cniSocket: string;
  private seq = 0;
  /** The node netns's links, looked up without a spawn (vethsGone). */
  private links = new NetlinkSocket();

  constructor(private readonly o: BenchOpts) {
    this.podDir = path.join('/run', `${path.basename(o.dir)}-netns`);
    this.socket = path.join(o.dir, 'kni.sock');
    this.cniSocket = path.join(o.dir, 'cni.sock');
  }

  async startDaemon(): Promise<void> {
    const config = path.join(this.o.dir, 'kni.json');
    fs.writeFileSync(config, JSON.stringify({
      ranges: ['10.128.0.0/16', 'fd00:128::/64'], netnsDir: this.podDir, cni: { socket: this.cniSocket }, podLink: this.o.podLink,
    }));
    this.daemon = spawn(process.execPath, [path.join(ROOT, 'dist/plugin/main.js'), '--metrics-addr', METRICS, '--socket', this.socket, '--state-dir', path.join(this.o.dir, 'state'), '--config', config], { stdio: ['ignore', 'pipe', 'inherit'] });
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
    this.links.close();
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
    return attachMsFromLog(this.daemonOut.slice(mark));
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

  /** n pods' netns made for `use`, and removed after it, whatever it does. */
  async withPods<T>(n: number, use: (pods: { id: string; netns: string }[]) => Promise<T>): Promise<T> {
    const pods = this.newPods(n);
    try {
      return await use(pods);
    } finally {
      this.dropPods(pods);
    }
  }

  paths(): Path[] {
    return benchPaths({ rt: this.client, kni: kniClient(this.socket), cniSocket: this.cniSocket, dir: this.o.dir });
  }

  /** N pods attached with the given concurrency, then detached the same way. */
  async addDel(p: Path, concurrency: number): Promise<Omit<BenchRow, 'path' | 'concurrency'>> {
    return this.withPods(this.o.n, async (pods) => {
      const mark = this.daemonOut.length;
      const steps0 = await readSteps(METRICS);
      const cpu0 = cpuMs(this.daemon!.pid!);
      const client0 = process.cpuUsage();
      const add = await pool(pods.length, concurrency, (i) => p.add(pods[i].id, pods[i].netns));
      const client = process.cpuUsage(client0);
      const daemonCpuPerAdd = perPod(cpu0, cpuMs(this.daemon!.pid!), pods.length);
      // This process's CPU: the gRPC client's, plus reading the daemon's log lines.
      const clientCpuPerAdd = { user: client.user / 1e3 / pods.length, system: client.system / 1e3 / pods.length };
      const steps = stepMeans(steps0, await readSteps(METRICS));
      const inDaemon = p.name.startsWith('kni') ? this.inDaemonAttachMs(mark) : [];
      const del = await pool(pods.length, concurrency, (i) => p.del(pods[i].id, pods[i].netns));
      if (p.after) await pool(pods.length, concurrency, (i) => p.after!(pods[i].id));
      return { add: stats(add.ms, add.wall), del: stats(del.ms, del.wall), ...(inDaemon.length ? { inDaemonAdd: stats(inDaemon, add.wall), daemonCpuPerAdd, clientCpuPerAdd, steps } : {}) };
    });
  }

  /**
   * Attaches and detaches pods before the cells: a node's daemon runs for days, so the cells'
   * figures are of a warm one (V8 has compiled the attach path), not of its first minute. The
   * first FRESH attaches are timed apart: they are what the first pods on a node, or after a
   * restart of kni, wait for. Then `goN` cycles from the Go client, whose frames take paths of
   * their own in the daemon (grpc-go's window updates and BDP pings, its Huffman-coded
   * headers): a node's daemon serves containerd's calls all along. A fresh daemon's Go-client
   * overhead fell over its first ≈ 1,400 cycles, + 0.33–0.40 ms to + 0.23–0.24; with grpc-js's
   * warm-up only, the Go cell measured the first Go calls the daemon ever served. The grpc-js
   * cycles warm this process's client as well: V8 compiles grpc-js's call path over its first
   * ≈ 1,500 cycles, and with 300 the first grpc-js cell measured a client still half cold.
   */
  async warmUp(n: number, goN: number): Promise<{ grpc: Stats; inDaemon: Stats }> {
    const links = linkCount();
    const mark = this.daemonOut.length;
    const grpcMs: number[] = [];
    // In batches of a cell's N: no more pod netns held at once than in a cell.
    for (let done = 0; done < n; done += this.o.n) {
      await this.withPods(Math.min(this.o.n, n - done), async (pods) => {
        for (const p of pods) {
          const t = performance.now();
          await this.client.Attach({ sandbox_id: p.id, netns_path: p.netns });
          if (grpcMs.length < FRESH) grpcMs.push(performance.now() - t);
          await this.client.Detach({ sandbox_id: p.id, netns_ending: true });
        }
      });
    }
    await this.withPods(goN, (pods) => goClientAddDel(this.socket, pods, 1, this.o.dir));
    // The reaper deletes the retired veths after the answers, and the kernel dismantles the
    // dropped netns in the background: both hold locks the first measured attaches would wait on.
    for (let i = 0; i < 100 && linkCount() > links; i++) await new Promise((r) => setTimeout(r, 100));
    await new Promise((r) => setTimeout(r, 1000));
    const inDaemon = this.inDaemonAttachMs(mark).slice(0, FRESH);
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    return { grpc: stats(grpcMs, sum(grpcMs)), inDaemon: stats(inDaemon, sum(inDaemon)) };
  }

  /** addDel through kni's gRPC API from a Go client (bench/go-client.ts). */
  async addDelGo(concurrency: number): Promise<Omit<BenchRow, 'path' | 'concurrency'>> {
    return this.withPods(this.o.n, async (pods) => {
      const mark = this.daemonOut.length;
      const r = await goClientAddDel(this.socket, pods, concurrency, this.o.dir);
      return { add: stats(r.attachMs, r.attachWallMs), del: stats(r.detachMs, r.detachWallMs), inDaemonAdd: stats(this.inDaemonAttachMs(mark), r.attachWallMs), clientCpuPerAdd: r.clientCpuPerAttachMs };
    });
  }

  /**
   * Attaches per second one at a time and `many` at once, in alternating blocks from each client
   * (grpc-js and Go). The cells are minutes apart (a path's 16-at-once cell comes after every
   * path's one-at-a-time and 8-at-once cells), and this machine's speed drifts by 30–50 % in
   * minutes; a block pair is seconds apart, and which comes first alternates by round.
   */
  async concurrencyBlocks(rounds: number, perBlock: number, many: number): Promise<ConcurrencyBlocks> {
    const grpc = this.paths().find((p) => p.name === GRPC_PATH)!;
    // Wall ms of each client's blocks, one at a time and many at once: each holds rounds × perBlock pods.
    const walls = { grpc: { one: 0, many: 0 }, go: { one: 0, many: 0 } };
    for (let r = 0; r < rounds; r++) {
      for (const client of ['grpc', 'go'] as const) {
        for (const c of r % 2 ? [many, 1] : [1, many]) {
          const ids = await this.withPods(perBlock, async (pods) => {
            let wall: number;
            if (client === 'go') {
              wall = (await goClientAddDel(this.socket, pods, c, this.o.dir)).attachWallMs;
            } else {
              wall = (await pool(pods.length, c, (i) => grpc.add(pods[i].id, pods[i].netns))).wall;
              await pool(pods.length, c, (i) => grpc.del(pods[i].id, pods[i].netns));
            }
            walls[client][c === 1 ? 'one' : 'many'] += wall;
            return pods.map((p) => p.id);
          });
          // The next block starts once the kernel has dismantled these pods' netns and veths.
          await vethsGone(this.links, ids);
        }
      }
    }
    const rate = (wall: number) => ((rounds * perBlock) / wall) * 1000;
    const of = (x: { one: number; many: number }) => ({ one: rate(x.one), many: rate(x.many) });
    return { rounds, perBlock, many, grpc: of(walls.grpc), go: of(walls.go) };
  }

  /**
   * The kernel floor (bench/kernel-floor.c): the same netlink work as one kni attach and one
   * detach, in C, on kni's own bridge, for n pods in netns the bench made (as a runtime does).
   */
  floor(n: number): { attach: Stats; detach: Stats; groupDeleteMs: number; attachCpuMs: CpuMs } {
    const t0 = performance.now();
    const x = floorRun(path.join(this.podDir, 'floor'), n, false, this.o.podLink);
    const wall = performance.now() - t0;
    return { attach: stats(x.attachMs, wall), detach: stats(x.detachMs, wall), groupDeleteMs: x.groupDeleteMs, attachCpuMs: x.attachCpuMs };
  }

  /**
   * In-daemon attach against the floor, in alternating blocks (kni's pods detached before the
   * floor's blocks, so all see the same bridge): on a shared machine the two phases of a
   * comparison drift apart by 30–50 % minutes apart, and alternating cancels that drift. The
   * floor runs twice a block, in turn first: back to back, and paced, sleeping before each
   * attach as long as kni's daemon waited for the client's next call in that block (the call's
   * p50 less the in-daemon attach's): whether the pace matters on this machine.
   */
  async versusFloor(blocks: number, perBlock: number): Promise<{ inDaemon: Stats; grpc: Stats; floor: Stats; floorPaced: Stats; gapMs: number; plainDetach: Stats }> {
    const inDaemon: number[] = [];
    const grpc: number[] = [];
    const plainDetach: number[] = [];
    const floor: number[] = [];
    const floorPaced: number[] = [];
    const gaps: number[] = [];
    const kept: { netns: string }[] = [];
    const floorRuns: (() => void)[] = [];
    const t0 = performance.now();
    try {
      for (let b = 0; b < blocks; b++) {
        const pods = this.newPods(perBlock);
        kept.push(...pods);
        const mark = this.daemonOut.length;
        const calls: number[] = [];
        for (const p of pods) {
          const s = performance.now();
          await this.client.Attach({ sandbox_id: p.id, netns_path: p.netns });
          calls.push(performance.now() - s);
        }
        const attaches = this.inDaemonAttachMs(mark);
        grpc.push(...calls);
        inDaemon.push(...attaches);
        gaps.push(Math.max(0, percentile(calls, 50) - percentile(attaches, 50)));
        // Plain detaches: the netns stay (see floorRun); the floor's block starts once the veths are gone.
        for (const p of pods) {
          const s = performance.now();
          await this.client.Detach({ sandbox_id: p.id });
          plainDetach.push(performance.now() - s);
        }
        await vethsGone(this.links, pods.map((p) => p.id));
        for (const paced of b % 2 ? [true, false] : [false, true]) {
          const f = floorRun(path.join(this.podDir, `versus${b}${paced ? 'p' : ''}`), perBlock, true, this.o.podLink, paced ? gaps.at(-1)! * 1000 : 0);
          floorRuns.push(f.drop);
          (paced ? floorPaced : floor).push(...f.attachMs);
        }
      }
    } finally {
      this.dropPods(kept);
      for (const drop of floorRuns) drop();
    }
    const wall = performance.now() - t0;
    return { inDaemon: stats(inDaemon, wall), grpc: stats(grpc, wall), floor: stats(floor, wall), floorPaced: stats(floorPaced, wall), gapMs: percentile(gaps, 50), plainDetach: stats(plainDetach, wall) };
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
          await vethsGone(this.links, [p.id]);
        }
        const wall = performance.now() - t0;
        // The floor keeps its veths (retired) until its group delete, and a bridge takes at most
        // 1023 ports (the kernel answers EXFULL): at 1000 bridged pods only ≈ 20 fit.
        // The probe's netns go after the floor: the kernel dismantles dropped netns in the
        // background, under locks an attach needs.
        const floor = this.floor(this.o.podLink === 'routed' ? probe.length : Math.max(5, Math.min(probe.length, BRIDGE_MAX_PORTS - 3 - level))).attach;
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
        await this.withPods(1, async ([p]) => {
          await this.client.Attach({ sandbox_id: p.id, netns_path: p.netns });
          await this.client.Detach({ sandbox_id: p.id, netns_ending: true });
          cycles++;
        });
      }
    }));
    return { seconds: this.o.churnSeconds, cycles, cyclesPerSecond: cycles / this.o.churnSeconds, rssStartMb, rssEndMb: rssMb(this.daemon!.pid!) };
  }
}
