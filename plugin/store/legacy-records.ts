// Records as kni kept them before the record logs (record-log.ts): one `<key>.json` per record
// in a directory, with empty mark files `<key>.attached` / `<key>.detaching` beside a sandbox's.
// Read once at start, so that an upgrade keeps every pod; the files go once the log holds them.
import fs from 'node:fs';
import path from 'node:path';
import type { Imported } from './record-log';

type Phased = { phase?: string };

export function legacyRecords<T extends object>(dir: string): () => Imported<T> {
  return () => {
    const records = new Map<string, T>();
    const problems: string[] = [];
    const done: string[] = [];
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { records, problems, remove: () => undefined };
      throw e;
    }
    const present = new Set(names);
    for (const name of names) {
      const full = path.join(dir, name);
      if (name.endsWith('.corrupt')) continue;
      done.push(full); // records, marks (with or without their record) and half-written temporaries alike
      if (!name.endsWith('.json') || name.startsWith('.')) continue;
      const key = name.slice(0, -'.json'.length);
      try {
        const rec = JSON.parse(fs.readFileSync(full, 'utf8')) as T & Phased;
        // The marks said what the record's phase did not.
        if (present.has(`${key}.detaching`)) rec.phase = 'detaching';
        else if (present.has(`${key}.attached`)) rec.phase = 'attached';
        records.set(key, rec);
      } catch (e) {
        problems.push(`${full}: ${(e as Error).message} (kept as ${name}.corrupt)`);
        fs.renameSync(full, `${full}.corrupt`);
        done.pop();
      }
    }
    return {
      records,
      problems,
      remove() {
        for (const f of done) fs.rmSync(f, { force: true });
        if (!fs.readdirSync(dir).length) fs.rmdirSync(dir);
      },
    };
  };
}
