// Loaded into kni by bench:scale (NODE_OPTIONS=--require, KNI_TURN_PROBE=<file>): for each
// event-loop turn that held the loop 20 ms or more, how long the main thread was on a CPU and
// how long it waited, runnable, for one (the kernel's schedstat of the thread). A stall is kni's
// work, its garbage collection, or that wait: on a loaded machine the wait can be most of it.
import fs from 'node:fs';

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
