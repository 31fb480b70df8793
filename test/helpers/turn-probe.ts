// Loaded into kni by bench:scale and node-agent.cluster (NODE_OPTIONS=--require,
// KNI_TURN_PROBE=<file>; withTurnProbe): for each event-loop turn that held the loop 20 ms or
// more, how long the main thread was on a CPU and how long it waited, runnable, for one (the
// kernel's schedstat of the thread). A stall is kni's work, its garbage collection, or that
// wait: on a loaded machine the wait can be most of it, and the time on a CPU is kni's alone.
import fs from 'node:fs';

/** A long turn: when it ended (ms since the epoch), how late it made the loop, its time on a CPU and waiting for one (ms). */
export interface LongTurn {
  at: number;
  late: number;
  cpu: number;
  wait: number;
}

/** The long turns a probe wrote to `file` (none when it wrote nothing). */
export function longTurns(file: string): LongTurn[] {
  const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
  return text.split('\n').map((l) => l.split(' ').map(Number)).filter((t) => t.length === 4 && t.every(Number.isFinite)).map(([at, late, cpu, wait]) => ({ at, late, cpu, wait }));
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
  let last = performance.now();
  let [cpuAt, waitAt] = schedstat();
  setInterval(() => {
    const now = performance.now();
    const [cpu, wait] = schedstat();
    const late = now - last - TICK_MS;
    if (late >= 20) fs.appendFileSync(out, `${Date.now()} ${late.toFixed(1)} ${((cpu - cpuAt) / 1e6).toFixed(1)} ${((wait - waitAt) / 1e6).toFixed(1)}\n`);
    last = now;
    cpuAt = cpu;
    waitAt = wait;
  }, TICK_MS).unref();
}
