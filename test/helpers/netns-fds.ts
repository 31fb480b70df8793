// The network namespaces a process holds open by descriptor, read from /proc/<pid>/fd.
import fs from 'node:fs';

/** Descriptor → inode of the netns it is open on. */
export function netnsFds(pid: number | 'self'): Map<number, number> {
  const dir = `/proc/${pid}/fd`;
  const out = new Map<number, number>();
  for (const f of fs.readdirSync(dir)) {
    let target = '';
    try {
      target = fs.readlinkSync(`${dir}/${f}`);
    } catch {
      continue; // closed meanwhile
    }
    const m = /^net:\[(\d+)\]$/.exec(target);
    if (m) out.set(Number(f), Number(m[1]));
  }
  return out;
}
