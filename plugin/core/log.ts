// Structured JSON logs on stdout: what `kubectl logs` of the daemon pod shows.
export type Level = 'debug' | 'info' | 'warn' | 'error';
const order: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };

let threshold: number = order[(process.env.KNI_LOG_LEVEL as Level) ?? 'info'] ?? order.info;

export function setLogLevel(level: string): void {
  if (!(level in order)) throw new Error(`unknown log level ${JSON.stringify(level)} (want debug, info, warn or error)`);
  threshold = order[level as Level];
}

// Callers quote what they were sent; a hostile megabyte must not become a megabyte of log.
const MAX_FIELD = 1024;
const cut = (_key: string, v: unknown): unknown =>
  typeof v === 'string' && v.length > MAX_FIELD ? `${v.slice(0, MAX_FIELD)}… (${v.length} chars)` : v;

/** A duration for a log line, to the microsecond: 1.428 rather than 1.4283029999999999. */
export const logMs = (ms: number): number => Math.round(ms * 1000) / 1000;

/** Milliseconds since a process.hrtime.bigint() reading, for a log line. */
export const msSince = (started: bigint): number => logMs(Number(process.hrtime.bigint() - started) / 1e6);

/** Fields that need no cutting: flat, no string over MAX_FIELD (the lines of a pod's attach and detach). */
function short(fields: Record<string, unknown>): boolean {
  for (const k in fields) {
    const v = fields[k];
    if (typeof v === 'string' ? v.length > MAX_FIELD : typeof v === 'object' && v !== null) return false;
  }
  return true;
}

let cachedSecond = NaN;
let secondPrefix = '';
/**
 * A time in ms since the epoch as Date's toISOString writes it. The text up to the seconds is
 * made once a second: V8 formats a date with snprintf, ≈ 7,000 instructions a line (callgrind,
 * docs/performance-history.md), against a few hundred for this.
 */
export function isoTime(time: number = Date.now()): string {
  const ms = Math.floor(time); // as Date keeps it: whole milliseconds
  const second = Math.floor(ms / 1000);
  if (second !== cachedSecond) {
    cachedSecond = second;
    secondPrefix = new Date(second * 1000).toISOString().slice(0, -4);
  }
  const milli = ms - second * 1000;
  return `${secondPrefix}${milli < 10 ? '00' : milli < 100 ? '0' : ''}${milli}Z`;
}

/** Whether lines of this level are written: a caller whose fields take work can ask first. */
export const logEnabled = (level: Level): boolean => order[level] >= threshold;

// The log's reader gone (the pipe to it closed) must not end the daemon, and pod networking
// with it: Node throws an unhandled stream error from the event loop. Lines are dropped from then
// on, and that is said once on stderr, which may still be read (a reader of stderr gone alike).
let stdoutGone = false;
process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (stdoutGone) return;
  stdoutGone = true;
  process.stderr.write(`${JSON.stringify({ time: isoTime(), level: 'error', msg: 'the log on stdout cannot be written (its reader is gone): its lines are dropped from now on; kni goes on serving', error: e.code ?? e.message })}\n`);
});
process.stderr.on('error', () => undefined);

export function log(level: Level, msg: string, fields: Record<string, unknown> = {}): void {
  if (!logEnabled(level) || stdoutGone) return;
  const entry = { time: isoTime(), level, msg, ...fields };
  // A replacer takes V8 off its fast JSON path: an attach's line took ≈ 20 µs more with it,
  // between requests (docs/performance-history.md).
  process.stdout.write(`${msg.length <= MAX_FIELD && short(fields) ? JSON.stringify(entry) : JSON.stringify(entry, cut)}\n`);
}
