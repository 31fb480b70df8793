// The daemon's record logs (plugin/store/record-log.ts) as a test reads and edits them, with the
// daemon stopped (or, for reads, between its writes): what a crash or an operator leaves.
import fs from 'node:fs';
import path from 'node:path';
import { encodeEntry, recordOf, replay } from '../../plugin/store/record-log';

type Collection = 'sandboxes' | 'netns';
const logFile = (stateDir: string, c: Collection) => path.join(stateDir, `${c}.log`);

/** The live records of a collection, by key. */
export function stateRecords(stateDir: string, c: Collection): Map<string, any> {
  let text = '';
  try {
    text = fs.readFileSync(logFile(stateDir, c), 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  const out = new Map<string, any>();
  for (const [k, line] of replay(text).live) out.set(k, recordOf(line));
  return out;
}

export function writeStateRecord(stateDir: string, c: Collection, key: string, value: object): void {
  fs.appendFileSync(logFile(stateDir, c), encodeEntry({ k: key, v: value }));
}

export function removeStateRecord(stateDir: string, c: Collection, key: string): void {
  fs.appendFileSync(logFile(stateDir, c), encodeEntry({ k: key, d: 1 }));
}

/** Damages every line of a record in place (its checksum no longer matches), as a bad disk would. */
export function damageStateRecord(stateDir: string, c: Collection, key: string): void {
  const file = logFile(stateDir, c);
  const text = fs.readFileSync(file, 'utf8');
  const damaged = text.split(`"k":${JSON.stringify(key)}`).join(`"k":${JSON.stringify(`${key}?`)}`);
  if (damaged === text) throw new Error(`no record ${key} in ${file}`);
  fs.writeFileSync(file, damaged);
}
