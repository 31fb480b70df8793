// A CNI plugin exec'd as a runtime execs it (libcni): its own environment plus CNI_*, the
// network config on stdin, the result on stdout.
import { spawn } from 'node:child_process';
import path from 'node:path';

/** Where Debian's containernetworking-plugins are. */
export const CNI_BIN = '/usr/lib/cni';

/** Execs a CNI plugin exactly as a runtime does (libcni: its own environment plus CNI_*, config on stdin). */
export function execPlugin(binary: string, env: Record<string, string>, conf: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn(binary, [], { env: { ...process.env, CNI_PATH: CNI_BIN, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (out += b));
    p.on('error', reject);
    p.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${path.basename(binary)} ${env.CNI_COMMAND} ${env.CNI_CONTAINERID}: exit ${code}: ${out}`))));
    p.stdin.end(conf);
  });
}
