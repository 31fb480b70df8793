// The daemon's own timings: its step histogram (kni_step_duration_seconds, from its metrics
// endpoint: the mean of each step between two readings, in µs) and its attach log lines.
import http from 'node:http';

export type StepReading = Map<string, { count: number; sum: number }>;

/** Reads kni_step_duration_seconds' count and sum per step from http://addr/metrics. */
export async function readSteps(addr: string): Promise<StepReading> {
  const text = await new Promise<string>((resolve, reject) => {
    http.get(`http://${addr}/metrics`, (res) => {
      let body = '';
      res.on('data', (b) => (body += b));
      res.on('end', () => resolve(body));
    }).on('error', reject);
  });
  const out: StepReading = new Map();
  for (const m of text.matchAll(/^kni_step_duration_seconds_(sum|count)\{step="([^"]*)"\} (\S+)$/gm)) {
    const s = out.get(m[2]) ?? { count: 0, sum: 0 };
    if (m[1] === 'sum') s.sum = Number(m[3]);
    else s.count = Number(m[3]);
    out.set(m[2], s);
  }
  return out;
}

/** Each step's calls and mean time (µs) between two readings, slowest first. */
export interface StepMean { step: string; calls: number; meanUs: number }

export function stepMeans(before: StepReading, after: StepReading): StepMean[] {
  return [...after]
    .map(([step, a]) => {
      const b = before.get(step) ?? { count: 0, sum: 0 };
      const calls = a.count - b.count;
      return { step, calls, meanUs: calls ? ((a.sum - b.sum) / calls) * 1e6 : 0 };
    })
    .filter((x) => x.calls > 0)
    .sort((x, y) => y.meanUs - x.meanUs);
}

/** In-daemon attach times (ms): the `ms` of each "attach" line of the daemon's log text. */
export const attachMsFromLog = (text: string): number[] =>
  text.split('\n').filter((l) => l.includes('"msg":"attach"')).map((l) => JSON.parse(l).ms as number);
