// `mkdir -p` that always ends. Node's own recursive mkdir (fs.mkdirSync with recursive: true,
// Node 20 here) takes ENOENT to mean "the parent is missing", makes the parent, gets EEXIST and
// tries the child again, forever, when the kernel answers ENOENT for a child of a parent that
// exists: any path under /proc, or below a symlink whose target is missing (an unmounted disk).
// Measured here: fs.mkdirSync('/proc/x', { recursive: true }) never returns, and kni-runtime
// started with such a --state-dir spun at full CPU without a word. This walks up once to the
// deepest directory that exists and makes each missing one below it with a plain mkdir.
import fs from 'node:fs';
import path from 'node:path';

const codeOf = (e: unknown): string => (e as NodeJS.ErrnoException).code ?? '';

/** Makes `dir` and any missing parents (each with `mode`); an existing directory is fine. */
export function makeDir(dir: string, mode = 0o755): void {
  const missing: string[] = [];
  for (let at = path.resolve(dir); ; at = path.dirname(at)) {
    let st: fs.Stats;
    try {
      st = fs.statSync(at);
    } catch (e) {
      if (codeOf(e) !== 'ENOENT') throw e;
      missing.unshift(at);
      if (path.dirname(at) === at) break;
      continue;
    }
    if (!st.isDirectory()) throw notADirectory(at, dir);
    break;
  }
  for (const d of missing) {
    try {
      fs.mkdirSync(d, mode);
    } catch (e) {
      if (codeOf(e) !== 'EEXIST') throw e;
      // Made meanwhile by someone else is fine; a dangling symlink or a file is not.
      let isDir = false;
      try {
        isDir = fs.statSync(d).isDirectory();
      } catch {
        // a symlink whose target is missing
      }
      if (!isDir) throw notADirectory(d, dir);
    }
  }
}

function notADirectory(at: string, dir: string): NodeJS.ErrnoException {
  let link = false;
  try {
    link = fs.lstatSync(at).isSymbolicLink();
  } catch {
    // gone meanwhile
  }
  const e: NodeJS.ErrnoException = new Error(`cannot make directory ${dir}: ${at} ${link ? 'is a symlink whose target is missing or not a directory' : 'exists and is not a directory'}`);
  e.code = 'ENOTDIR';
  e.path = at;
  return e;
}
