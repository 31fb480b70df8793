// Loaded into kni by bench:scale and node-agent.cluster (NODE_OPTIONS=--require,
// KNI_TURN_PROBE=<file>; withTurnProbe): for each event-loop turn that held the loop 20 ms or
// more, how long the main thread was on a CPU and how long it waited, runnable, for one (the
// kernel's schedstat of the thread). A stall is kni's work, its garbage collection, or that
// wait: on a loaded machine the wait can be most of it, and the time on a CPU is kni's alone.
// And the main thread's garbage-collection pauses within the turn (perf_hooks' gc entries: wall
// time, so a wait for a CPU within a pause counts too).
import fs from 'node:fs';
import { PerformanceObserver } from 'node:perf_hooks';

/** A long turn: when it ended (ms since the epoch), how late it made the loop, its time on a CPU, waiting for one, and in GC pauses (ms). */
export interface LongTurn {
  at: number;
  late: number;
  cpu: number;
  wait: number;
  gc: number;
}

/** The long turns a probe wrote to `file` (none when it wrote nothing). */
export function longTurns(file: string): LongTurn[] {
  const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
  return text.split('\n').map((l) => l.split(' ').map(Number)).filter((t) => t.length === 5 && t.every(Number.isFinite)).map(([at, late, cpu, wait, gc]) => ({ at, late, cpu, wait, gc }));
}

/** `start` (which starts kni) run with the probe loaded into what it starts, writing to `file`. */
export function withTurnProbe<T>(file: string, start: () => T): T {
  fs.rmSync(file, { force: true });
  const was = { options: process.env.NODE_OPTIONS, out: process.env.KNI_TURN_PROBE };
  process.env.NODE_OPTIONS = `--require ${__filename}`;
  process.env.KNI_TURN_PROBE = file;
  try {
    return start();
  } finally {
    if (was.options === undefined) delete process.env.NODE_OPTIONS;
    else process.env.NODE_OPTIONS = was.options;
    if (was.out === undefined) delete process.env.KNI_TURN_PROBE;
    else process.env.KNI_TURN_PROBE = was.out;
  }
}

const out = process.env.KNI_TURN_PROBE;
if (out && process.argv[1]?.endsWith('plugin/main.js')) {
  const TICK_MS = 10;
  // Fields in ns: time on a CPU, time waiting on a runqueue (then the count of slices).
  const schedstat = (): number[] => fs.readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ').map(Number);
  // gc entries reach an observer after the turn they were in: a turn is written once they are in.
  const gcs: { start: number; end: number }[] = [];
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gcs.push({ start: e.startTime, end: e.startTime + e.duration });
  }).observe({ entryTypes: ['gc'] });
  const pending: { from: number; to: number; line: string }[] = [];
  let last = performance.now();
  let [cpuAt, waitAt] = schedstat();
  setInterval(() => {
    const now = performance.now();
    const [cpu, wait] = schedstat();
    const late = now - last - TICK_MS;
    if (late >= 20) pending.push({ from: last, to: now, line: `${Date.now()} ${late.toFixed(1)} ${((cpu - cpuAt) / 1e6).toFixed(1)} ${((wait - waitAt) / 1e6).toFixed(1)}` });
    while (pending.length && pending[0].to < now - 100) {
      const t = pending.shift()!;
      const gc = gcs.reduce((sum, g) => sum + Math.max(0, Math.min(g.end, t.to) - Math.max(g.start, t.from)), 0);
      fs.appendFileSync(out, `${t.line} ${gc.toFixed(1)}\n`);
    }
    while (gcs.length && gcs[0].end < now - 1000) gcs.shift();
    last = now;
    cpuAt = cpu;
    waitAt = wait;
  }, TICK_MS).unref();
}
