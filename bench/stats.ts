import { spawnSync } from 'node:child_process';
import fs from 'node:fs';

/** A process's resident memory in MB. */
export const rssMb = (pid: number): number => {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
};

/** The p-th percentile (nearest rank) of a sample. */
export function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

let ticksPerSecond = 0;

/** A process's CPU time so far (ms, all its threads): user (its own code) and system (the kernel on its behalf). */
export function cpuMs(pid: number, tid?: number): CpuMs {
  ticksPerSecond ||= Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;
  // Fields after the command name (which may hold spaces), from field 3 on: utime is 14, stime 15.
  const stat = fs.readFileSync(tid ? `/proc/${pid}/task/${tid}/stat` : `/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: (Number(f[11]) * 1000) / ticksPerSecond, system: (Number(f[12]) * 1000) / ticksPerSecond };
}

/** CPU time so far (ms) of each thread of a process, by thread name (threads of one name summed). */
export function threadCpuMs(pid: number): Map<string, CpuMs> {
  const out = new Map<string, CpuMs>();
  for (const tid of fs.readdirSync(`/proc/${pid}/task`).map(Number)) {
    try {
      const name = fs.readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      const t = cpuMs(pid, tid);
      const sum = out.get(name) ?? { user: 0, system: 0 };
      out.set(name, { user: sum.user + t.user, system: sum.system + t.system });
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

export type CpuMs = { user: number; system: number };
/** CPU per pod (ms) between two readings of cpuMs. */
export const perPod = (a: CpuMs, b: CpuMs, n: number): CpuMs => ({ user: (b.user - a.user) / n, system: (b.system - a.system) / n });

export interface Stats { n: number; p50: number; p90: number; p99: number; opsPerSecond: number }
export const stats = (xs: number[], wallMs: number): Stats => ({
  n: xs.length,
  p50: percentile(xs, 50),
  p90: percentile(xs, 90),
  p99: percentile(xs, 99),
  opsPerSecond: (xs.length / wallMs) * 1000,
});

/** Runs op(0..n-1) with at most `concurrency` in flight; returns each op's ms and the wall ms. */
export async function pool(n: number, concurrency: number, op: (i: number) => Promise<void>): Promise<{ ms: number[]; wall: number }> {
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
