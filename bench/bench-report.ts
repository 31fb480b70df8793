// The bench's report: the tables in markdown and the figures to watch for regressions, from one
// run's figures (no verdicts: performance is judged through containerd and in the cluster).
import os from 'node:os';
import type { PodWiring } from '../plugin/core/config';
import { GO_PATH } from './go-client';
import type { StepMean } from './step-times';
import type { CpuMs, Stats } from './stats';
import { TransportRow, transportTable } from './transport-floor';

/** Attaches per second one at a time and `many` at once, each client's blocks alternating. */
export interface ConcurrencyBlocks { rounds: number; perBlock: number; many: number; grpc: { one: number; many: number }; go: { one: number; many: number } }

export interface BenchRow { path: string; concurrency: number; add: Stats; del: Stats; inDaemonAdd?: Stats; daemonCpuPerAdd?: CpuMs; clientCpuPerAdd?: CpuMs; steps?: StepMean[] }

/** The reference plugins' row: "<bridge or ptp> + host-local + loopback (exec)". */
export const REFERENCE_SUFFIX = ' + host-local + loopback (exec)';
/** kni's gRPC API from a grpc-js client. */
export const GRPC_PATH = 'kni gRPC';
/** The kubelet fork's KNI POC flow, where kni makes the pod's netns (bench-paths.ts). */
export const POC_PATH = 'kni POC API (kni makes the netns)';

export interface BenchResults {
  n: number;
  podLink: PodWiring;
  rows: BenchRow[];
  floor: { attach: Stats; detach: Stats; groupDeleteMs: number; attachCpuMs: CpuMs };
  /** plainDetach: the blocks' Detach calls without netns_ending (the caller keeps the netns). */
  /** floorPaced: the floor sleeping gapMs before each attach, as the daemon waited for its client's next call. */
  versus: { inDaemon: Stats; grpc: Stats; floor: Stats; floorPaced: Stats; gapMs: number; plainDetach: Stats };
  concurrencyBlocks: ConcurrencyBlocks;
  scale: { pods: number; attach: Stats; inDaemon: Stats; floor: Stats; rssMb: number }[];
  churn: { seconds: number; cycles: number; cyclesPerSecond: number; rssStartMb: number; rssEndMb: number };
  transport: TransportRow[];
  /** A fresh daemon's first attaches (one at a time, each followed by its detach), before the warm-up's rest. */
  fresh: { grpc: Stats; inDaemon: Stats };
}

export const f2 = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));

export function benchReport(res: BenchResults): { text: string; figures: { figure: string; value: string }[] } {
  const { n, podLink, rows, floor, versus, concurrencyBlocks: blocks, scale, churn, transport, fresh } = res;
  const ref = (c: number) => rows.find((r) => r.concurrency === c && r.path.endsWith(REFERENCE_SUFFIX))!;
  const refName = ref(1).path.slice(0, -REFERENCE_SUFFIX.length);
  const lines: string[] = [];
  lines.push(`\n## kni vs CNI reference plugins (N = ${n} per cell, ms per pod)\n`);
  lines.push(`${os.cpus().length} vCPU, kernel ${os.release()}, Node ${process.version}; kni's podLink ${podLink}; reference: Debian containernetworking-plugins ${refName} + host-local (ipMasq on, dual-stack) + loopback.\n`);
  lines.push('| path | at once | ADD p50 / p90 / p99 | DEL p50 / p90 / p99 | ADD/s | reference ÷ this, ADD p50 / p99 | DEL p50 / p99 |');
  lines.push('|---|---|---|---|---|---|---|');
  for (const r of rows) {
    const x = ref(r.concurrency);
    lines.push(`| ${r.path} | ${r.concurrency} | ${f2(r.add.p50)} / ${f2(r.add.p90)} / ${f2(r.add.p99)} | ${f2(r.del.p50)} / ${f2(r.del.p90)} / ${f2(r.del.p99)} | ${r.add.opsPerSecond.toFixed(0)} | ${(x.add.p50 / r.add.p50).toFixed(1)}× / ${(x.add.p99 / r.add.p99).toFixed(1)}× | ${(x.del.p50 / r.del.p50).toFixed(1)}× / ${(x.del.p99 / r.del.p99).toFixed(1)}× |`);
  }
  const inD = rows.find((r) => r.concurrency === 1 && r.path === GRPC_PATH)!.inDaemonAdd!;
  const go1 = rows.find((r) => r.concurrency === 1 && r.path === GO_PATH)!;
  const go16 = rows.find((r) => r.concurrency === 16 && r.path === GO_PATH)!;
  lines.push(`\nIn-daemon attach (from the daemon's own log, sequential): p50 ${f2(inD.p50)} / p90 ${f2(inD.p90)} / p99 ${f2(inD.p99)} ms.\n`);
  lines.push(`A fresh daemon's first ${fresh.grpc.n} attaches (the first pods on a node, or after kni restarts; the cells above are of a warm daemon): gRPC p50 ${f2(fresh.grpc.p50)} / slowest ${f2(fresh.grpc.p99)} ms, in-daemon p50 ${f2(fresh.inDaemon.p50)} ms.\n`);
  const grpc1 = rows.find((r) => r.concurrency === 1 && r.path === GRPC_PATH)!;
  const grpc16 = rows.find((r) => r.concurrency === 16 && r.path === GRPC_PATH)!;
  lines.push(`### kni ÷ kernel floor (bench/kernel-floor.c: the same netlink messages in C, podLink ${podLink}, same N, sequential)\n`);
  lines.push('| | kni p50 / p99 (ms) | floor p50 / p99 (ms) | kni ÷ floor, p50 |\n|---|---|---|---|');
  lines.push(`| attach, in-daemon | ${f2(inD.p50)} / ${f2(inD.p99)} | ${f2(floor.attach.p50)} / ${f2(floor.attach.p99)} | ${(inD.p50 / floor.attach.p50).toFixed(2)}× |`);
  lines.push(`| attach, gRPC | ${f2(grpc1.add.p50)} / ${f2(grpc1.add.p99)} | ${f2(floor.attach.p50)} / ${f2(floor.attach.p99)} | ${(grpc1.add.p50 / floor.attach.p50).toFixed(2)}× |`);
  lines.push(`| attach, gRPC from Go (in-daemon in that run ${f2(go1.inDaemonAdd!.p50)}) | ${f2(go1.add.p50)} / ${f2(go1.add.p99)} | ${f2(floor.attach.p50)} / ${f2(floor.attach.p99)} | ${(go1.add.p50 / floor.attach.p50).toFixed(2)}× |`);
  lines.push(`| detach, gRPC (the runtime made the netns) | ${f2(grpc1.del.p50)} / ${f2(grpc1.del.p99)} | ${f2(floor.detach.p50)} / ${f2(floor.detach.p99)} | ${(grpc1.del.p50 / floor.detach.p50).toFixed(2)}× |\n`);
  lines.push(`Alternating blocks (8 × 50 pods, kni's then the floor's, on the same node): in-daemon attach p50 ${f2(versus.inDaemon.p50)} ms, the floor ${f2(versus.floor.p50)} ms: ${(versus.inDaemon.p50 / versus.floor.p50).toFixed(2)}×; the floor paced as kni's attaches came (${f2(versus.gapMs)} ms of sleep before each, the daemon's wait for its client's next call) ${f2(versus.floorPaced.p50)} ms: ${(versus.inDaemon.p50 / versus.floorPaced.p50).toFixed(2)}×; gRPC attach p50 ${f2(versus.grpc.p50)} ms; their plain Detach (the caller keeps the netns) p50 ${f2(versus.plainDetach.p50)} ms.\n`);
  const cpu = grpc1.daemonCpuPerAdd!;
  lines.push(`CPU per attach (mean, sequential; the daemon's all threads, from /proc): kni daemon ${f2(cpu.user)} ms user (JavaScript, V8, libuv) + ${f2(cpu.system)} ms system (the kernel: netlink, the socket, the event loop); the floor ${f2(floor.attachCpuMs.user)} user + ${f2(floor.attachCpuMs.system)} system.\n`);
  const cpuOf = (c: CpuMs) => f2(c.user + c.system);
  const ratio = (x: { one: number; many: number }) => x.many / x.one;
  const cellRatio = (one: BenchRow, many: BenchRow) => many.add.opsPerSecond / one.add.opsPerSecond;
  const blocksOf = (x: { one: number; many: number }) => `${ratio(x).toFixed(2)}× (${x.many.toFixed(0)}/s against ${x.one.toFixed(0)}/s)`;
  lines.push(`${blocks.many} at once ÷ one at a time, attaches/s in alternating blocks (${blocks.rounds} rounds of ${blocks.perBlock} pods each way, seconds apart; the cells above are minutes apart): grpc-js ${blocksOf(blocks.grpc)}, Go ${blocksOf(blocks.go)}.\n`);
  lines.push(`The client's own CPU per attach (sequential): grpc-js ${cpuOf(grpc1.clientCpuPerAdd!)} ms, grpc-go ${cpuOf(go1.clientCpuPerAdd!)} ms; at 16 at once ${cpuOf(grpc16.clientCpuPerAdd!)} and ${cpuOf(go16.clientCpuPerAdd!)} ms, on the same 2 vCPUs as the daemon.\n`);
  lines.push(`Where the in-daemon attach goes (the daemon's kni_step_duration_seconds, sequential cell, mean per attach): ${grpc1.steps!.filter((x) => x.calls === n).map((x) => `${x.step} ${f2(x.meanUs / 1000)} ms`).join(', ')}.\n`);
  lines.push(`The floor's detach is kni's when the runtime tears the netns down next: the host veth retired in one request; the ${n} retired veths were then deleted in one request of ${f2(floor.groupDeleteMs)} ms (kni's reaper thread does that after the answers).\n`);
  lines.push('| pods already attached | gRPC attach p50 / p90 / p99 (ms) | in-daemon p50 | kernel floor p50 | daemon RSS (MB) |\n|---|---|---|---|---|');
  for (const s of scale) lines.push(`| ${s.pods} | ${f2(s.attach.p50)} / ${f2(s.attach.p90)} / ${f2(s.attach.p99)} | ${f2(s.inDaemon.p50)} | ${f2(s.floor.p50)} | ${s.rssMb.toFixed(0)} |`);
  const grow = (pick: (s: (typeof scale)[number]) => Stats) => (pick(scale.at(-1)!).p50 / pick(scale[0]).p50).toFixed(2);
  lines.push(`\n${scale.at(-1)!.pods} pods ÷ ${scale[0].pods}, p50: gRPC ${grow((s) => s.attach)}×, in-daemon ${grow((s) => s.inDaemon)}×, kernel floor ${grow((s) => s.floor)}×.\n`);
  lines.push(`\n### What a call costs before kni does anything (bench/transport-floor.ts)\n\n${transportTable(transport)}\n`);
  lines.push(`\nChurn: ${churn.cycles} attach+detach cycles in ${churn.seconds} s = ${churn.cyclesPerSecond.toFixed(0)}/s (16 at once); daemon RSS ${churn.rssStartMb.toFixed(0)} → ${churn.rssEndMb.toFixed(0)} MB.\n`);

  const shim1 = rows.find((r) => r.concurrency === 1 && r.path.startsWith('kni-cni'))!;
  const poc1 = rows.find((r) => r.concurrency === 1 && r.path === POC_PATH)!;
  const http2Idle = transport.find((t) => t.path.startsWith("Node's HTTP/2"))!.afterIdle;
  const first = scale[0];
  const last = scale.at(-1)!;
  const figures = [
    { figure: 'in-daemon attach p50 ÷ the kernel floor (alternating blocks)', value: `${(versus.inDaemon.p50 / versus.floor.p50).toFixed(2)}× (${(inD.p50 / floor.attach.p50).toFixed(2)}× phases apart; ${(versus.inDaemon.p50 / versus.floorPaced.p50).toFixed(2)}× the floor paced as kni's calls came)` },
    { figure: 'gRPC Attach p50 − in-daemon p50', value: `+${f2(grpc1.add.p50 - inD.p50)} ms (a no-op call over Node's HTTP/2 alone: ${f2(http2Idle)} ms after idle)` },
    { figure: '… the same from a Go client (grpc-go, as containerd calls)', value: `+${f2(go1.add.p50 - go1.inDaemonAdd!.p50)} ms` },
    { figure: 'attaches/s 16 at once ÷ one at a time (alternating blocks)', value: `${ratio(blocks.grpc).toFixed(2)}× (${cellRatio(grpc1, grpc16).toFixed(2)}× cells apart)` },
    { figure: '… the same from a Go client', value: `${ratio(blocks.go).toFixed(2)}× (${cellRatio(go1, go16).toFixed(2)}× cells apart)` },
    { figure: 'DEL p50 (netns made by the runtime)', value: `${f2(grpc1.del.p50)} ms` },
    { figure: '… netns made by kni (the POC flow\'s DetachInterface)', value: `${f2(poc1.del.p50)} ms` },
    { figure: '… a plain Detach (the caller keeps the netns; alternating blocks)', value: `${f2(versus.plainDetach.p50)} ms` },
    { figure: `${refName} + host-local ADD ÷ kni-cni ADD (p50, sequential)`, value: `${(ref(1).add.p50 / shim1.add.p50).toFixed(1)}×` },
    { figure: `attach at ${last.pods} pods ÷ attach at ${first.pods} (p50)`, value: `${(last.attach.p50 / first.attach.p50).toFixed(2)}×` },
    { figure: `daemon RSS at ${last.pods} pods`, value: `${last.rssMb.toFixed(0)} MB` },
  ];
  lines.push('| figure | this run |\n|---|---|');
  for (const f of figures) lines.push(`| ${f.figure} | ${f.value} |`);

  return { text: `${lines.join('\n')}\n`, figures };
}
