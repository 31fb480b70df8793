// One collection of records as an append-only log: every change is one line written to a file
// kept open, and the file is rewritten with only the live records now and then.
//
// Why not one file per record: on this machine kind's ext4 creating a file (the temporary
// record, its rename, a commit mark) costs 0.3–1.3 ms each, even on an idle disk, and more
// while other processes write; an append to an open file costs ≈ 3 µs. An attach wrote a
// record and a commit, a detach a mark and two unlinks: 1–2.5 ms of every attach went there.
//
// Crash safety: a line is one write(2); a kill -9 cannot cut a write to a local file in two, so
// a process crash leaves whole lines. A machine crash may leave a torn last line (there is no
// fsync: after a reboot every netns is gone and GC reclaims the records) or a damaged one:
// each line carries a CRC-32 of its JSON, a torn tail is dropped and a damaged line is
// reported, the log kept aside, and what the kernel still has is rebuilt (recovery.ts).
// A rewrite goes to a temporary file renamed over the log: either the old or the new is there.
import fs from 'node:fs';
import zlib from 'node:zlib';
import { log } from '../core/log';
import * as libc from '../sys/libc';

/** One change: a record written whole, or a record gone. */
export type LogEntry<T> = { k: string; v: T } | { k: string; d: 1 };

/** The line for one change: CRC-32 of the JSON (8 hex digits), a space, the JSON, a newline. */
export function encodeEntry<T>(e: LogEntry<T>): string {
  const json = JSON.stringify(e);
  return `${zlib.crc32(json).toString(16).padStart(8, '0')} ${json}\n`;
}

/** The record a put line carries. */
export const recordOf = <T>(line: string): T => (JSON.parse(line.slice(9)) as { v: T }).v;

/** The live records of a log's text, in the order first written, and what could not be read. */
export function replay<T>(text: string): { live: Map<string, string>; damaged: number[]; tornTail: boolean } {
  const live = new Map<string, string>(); // key → its record's line
  const damaged: number[] = [];
  const lines = text.split('\n');
  const tail = lines.pop() ?? '';
  lines.forEach((line, i) => {
    const json = line.slice(9);
    let e: LogEntry<T> | undefined;
    try {
      if (line[8] === ' ' && zlib.crc32(json).toString(16).padStart(8, '0') === line.slice(0, 8)) e = JSON.parse(json) as LogEntry<T>;
    } catch {
      e = undefined;
    }
    if (!e || typeof e.k !== 'string' || !e.k || !('v' in e || 'd' in e)) {
      damaged.push(i + 1);
    } else if ('d' in e) {
      live.delete(e.k);
    } else {
      live.delete(e.k); // a rewrite moves the record to the end: the order is the order of last writes
      live.set(e.k, `${line}\n`);
    }
  });
  return { live, damaged, tornTail: tail !== '' };
}

/** A disk with no room, or one that takes no writes: kni starts from what is there. */
const FULL = new Set(['ENOSPC', 'EDQUOT', 'EROFS']);

/** A log is rewritten once it holds this many lines more than it has live records. */
const REWRITE_SLACK = (live: number) => Math.max(1024, 3 * live);

/** Records brought in from elsewhere at start; remove() once they are in the log. */
export interface Imported<T> {
  records: Map<string, T>;
  problems: string[];
  remove(): void;
}

export class RecordLog<T extends object> {
  private fd = -1;
  private size = 0;
  private lines = 0;
  private live = new Map<string, string>();
  /** What the start found unreadable; set once the log is loaded. */
  private problems?: string[];

  constructor(readonly file: string, private readonly imported: () => Imported<T> = () => ({ records: new Map(), problems: [], remove: () => undefined })) {}

  /**
   * The live records. The log is read at the first call (or write): replayed over what
   * `imported` brings (records of the one-file-per-record layout of earlier versions), then
   * written back whole. problems: what was unreadable then, for the caller to report.
   */
  loadAll(): { records: T[]; problems: string[] } {
    this.open();
    return { records: [...this.live.values()].map((l) => recordOf<T>(l)), problems: this.problems! };
  }

  private open(): void {
    if (this.problems) return;
    fs.rmSync(`${this.file}.tmp`, { force: true }); // a rewrite a crash cut short
    const legacy = this.imported();
    const problems = [...legacy.problems];
    let text = '';
    try {
      text = fs.readFileSync(this.file, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    const { live, damaged, tornTail } = replay<T>(text);
    if (damaged.length) {
      let kept = `the log is kept as ${this.file}.corrupt`;
      try {
        fs.copyFileSync(this.file, `${this.file}.corrupt`);
      } catch (e) {
        fs.rmSync(`${this.file}.corrupt`, { force: true });
        kept = `no copy kept: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`;
      }
      problems.push(`${this.file}: line${damaged.length > 1 ? 's' : ''} ${damaged.slice(0, 20).join(', ')} unreadable (${kept})`);
    }
    if (tornTail) problems.push(`${this.file}: a torn last line dropped`);
    for (const [k, v] of legacy.records) if (!live.has(k)) live.set(k, encodeEntry({ k, v }));
    this.live = live;
    try {
      this.rewrite();
      legacy.remove();
    } catch (e) {
      // A full (or read-only) state dir: kni starts all the same and serves what the log holds
      // (detaches and queries need no room; a new record fails its attach with the reason), and
      // compacts once a line goes in again. Imported records stay where they are until then.
      if (!FULL.has((e as NodeJS.ErrnoException).code ?? '') || legacy.records.size) throw e;
      log('error', 'the state dir has no room: kni serves from the records on disk, refuses what must write a new one, and compacts its log once there is room', { file: this.file, error: (e as NodeJS.ErrnoException).code });
      this.fd = fs.openSync(this.file, 'a', 0o600);
      this.size = Buffer.byteLength(text) - (tornTail ? Buffer.byteLength(text.slice(text.lastIndexOf('\n') + 1)) : 0);
      // Appends go after the last whole line (a torn tail is written over).
      fs.ftruncateSync(this.fd, this.size);
      this.lines = Number.MAX_SAFE_INTEGER;
    }
    this.problems = problems;
  }

  /** Writes a record whole (replacing the one of that key). */
  put(key: string, value: T): void {
    const line = encodeEntry({ k: key, v: value });
    this.append(line);
    this.live.set(key, line);
  }

  /** Gone from memory even when the line cannot be written: the next rewrite leaves it out. */
  delete(key: string): void {
    if (!this.live.delete(key)) return;
    this.append(encodeEntry({ k: key, d: 1 }));
  }

  close(): void {
    if (this.fd >= 0) fs.closeSync(this.fd);
    this.fd = -1;
  }

  private append(line: string): void {
    this.open();
    const buf = Buffer.from(line);
    try {
      // libc's write rather than Node's writeSync: ≈ 4–5 µs less a line in the daemon, two
      // lines an attach (docs/performance-history.md).
      for (let off = 0; off < buf.length; ) off += libc.write(this.fd, off ? buf.subarray(off) : buf);
    } catch (e) {
      // A short write (a full disk) must not leave half a line for the next one to follow.
      try {
        fs.ftruncateSync(this.fd, this.size);
      } catch {
        // the next start drops what it cannot read
      }
      throw e;
    }
    this.size += buf.length;
    if (++this.lines <= this.live.size + REWRITE_SLACK(this.live.size)) return;
    try {
      this.rewrite();
    } catch (e) {
      // The line is in the log: the change stands. The rewrite is tried again later.
      this.lines = this.live.size;
      log('warn', 'cannot rewrite a state log; it keeps growing until a rewrite succeeds', { file: this.file, error: (e as Error).message });
    }
  }

  /** The log with only the live records: a temporary file renamed over it, then appended to. */
  private rewrite(): void {
    const text = [...this.live.values()].join('');
    try {
      fs.writeFileSync(`${this.file}.tmp`, text, { mode: 0o600 });
      fs.renameSync(`${this.file}.tmp`, this.file);
    } catch (e) {
      fs.rmSync(`${this.file}.tmp`, { force: true });
      throw e;
    }
    this.close();
    this.fd = fs.openSync(this.file, 'a', 0o600);
    this.size = Buffer.byteLength(text);
    this.lines = this.live.size;
  }
}
