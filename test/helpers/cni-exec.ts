// Execs kni-cni exactly as a CNI-calling runtime does: CNI_* environment, config on stdin.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';

export const SHIM = path.join(packageRoot(), 'dist/bin/kni-cni');

export interface CniRun {
  code: number;
  out: any;
  raw: string;
}

export function cni(command: string, env: Record<string, string>, conf: Record<string, unknown> | string): CniRun {
  const r = spawnSync(SHIM, [], {
    input: typeof conf === 'string' ? conf : JSON.stringify(conf),
    encoding: 'utf8',
    env: { CNI_COMMAND: command, CNI_PATH: '/usr/lib/cni', ...env },
  });
  let out: any;
  try {
    out = r.stdout ? JSON.parse(r.stdout) : undefined;
  } catch {
    out = undefined;
  }
  return { code: r.status ?? -1, out, raw: `${r.stdout}${r.stderr}` };
}
