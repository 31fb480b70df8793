// The state store: one JSON file per record under the state dir. A write goes to a temporary
// file that is then renamed over the record, so a kill -9 at any point leaves either the old or
// the new record, never a torn one. No fsync: a process crash loses nothing written, and after
// a machine crash every netns is gone anyway and the records are reclaimed by GC.
import fs from 'node:fs';
import path from 'node:path';
import { log } from '../core/log';
import { NetnsRecord, SandboxRecord } from './records';

/** One unlink (rmSync with force stats first: an extra syscall per file on every detach). */
function unlinkIfThere(file: string): void {
  try {
    fs.unlinkSync(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
}

class Collection<T extends object> {
  constructor(private readonly dir: string) {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  private file(key: string): string {
    return path.join(this.dir, `${key}.json`);
  }

  put(key: string, value: T): void {
    const tmp = path.join(this.dir, `.${key}.tmp`);
    fs.writeFileSync(tmp, JSON.stringify(value), { mode: 0o600 });
    fs.renameSync(tmp, this.file(key));
  }

  /**
   * Marks a record with an empty file beside it (key.<flag>). On ext4 (auto_da_alloc) a rename
   * over an existing file flushes its data first: rewriting a record cost 1–4 ms here, creating
   * an empty file costs tens of µs. Attach uses this for its commit.
   */
  mark(key: string, flag: string): void {
    fs.closeSync(fs.openSync(path.join(this.dir, `${key}.${flag}`), 'w', 0o600));
  }

  marked(key: string, flag: string): boolean {
    return fs.existsSync(path.join(this.dir, `${key}.${flag}`));
  }

  /** The record first, then its marks: a crash in between leaves a mark alone, which loadAll drops. */
  delete(key: string, flags: string[] = []): void {
    unlinkIfThere(this.file(key));
    for (const f of flags) unlinkIfThere(path.join(this.dir, `${key}.${f}`));
  }

  /** Every readable record; unreadable ones are reported and set aside (.corrupt). */
  loadAll(): { records: T[]; corrupt: string[] } {
    const records: T[] = [];
    const corrupt: string[] = [];
    for (const name of fs.readdirSync(this.dir)) {
      const full = path.join(this.dir, name);
      if (name.endsWith('.tmp')) {
        fs.rmSync(full, { force: true });
        continue;
      }
      if (!name.endsWith('.json')) {
        // A mark whose record is gone (a crash between the two deletes).
        const dot = name.lastIndexOf('.');
        if (dot > 0 && !name.endsWith('.corrupt') && !fs.existsSync(path.join(this.dir, `${name.slice(0, dot)}.json`))) fs.rmSync(full, { force: true });
        continue;
      }
      try {
        records.push(JSON.parse(fs.readFileSync(full, 'utf8')) as T);
      } catch (e) {
        corrupt.push(name);
        log('error', 'unreadable state record set aside', { file: full, error: (e as Error).message });
        fs.renameSync(full, `${full}.corrupt`);
      }
    }
    return { records, corrupt };
  }
}

export class StateStore {
  readonly sandboxes: Collection<SandboxRecord>;
  readonly netns: Collection<NetnsRecord>;

  constructor(readonly dir: string) {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    this.sandboxes = new Collection(path.join(dir, 'sandboxes'));
    this.netns = new Collection(path.join(dir, 'netns'));
  }
}
