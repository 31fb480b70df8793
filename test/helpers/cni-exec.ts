// Execs kni-cni exactly as a CNI-calling runtime does: CNI_* environment, config on stdin.
import { spawn, spawnSync } from 'node:child_process';
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
  return cniRun(r.status, r.stdout, r.stderr);
}

/** cni() without blocking the test's event loop (a call that waits for a daemon the test starts). */
export function cniAsync(command: string, env: Record<string, string>, conf: Record<string, unknown>): Promise<CniRun> {
  const p = spawn(SHIM, [], { env: { CNI_COMMAND: command, CNI_PATH: '/usr/lib/cni', ...env } });
  let stdout = '';
  let stderr = '';
  p.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  p.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  p.stdin.end(JSON.stringify(conf));
  return new Promise((resolve, reject) => {
    p.once('error', reject);
    p.once('close', (code) => resolve(cniRun(code, stdout, stderr)));
  });
}

function cniRun(code: number | null, stdout: string, stderr: string): CniRun {
  let out: any;
  try {
    out = stdout ? JSON.parse(stdout) : undefined;
  } catch {
    out = undefined;
  }
  return { code: code ?? -1, out, raw: `${stdout}${stderr}` };
}
