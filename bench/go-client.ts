// kni's gRPC API called from Go (bench/grpc-go-client), as containerd calls it: the client's
// own cost is then grpc-go's, not grpc-js's, and what remains over the in-daemon time is the
// daemon's transport. Built by `hack/cluster/build-components.sh bench-client` (npm run bench
// does it) into the cache outside the work tree.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export const GO_CLIENT = path.join(process.env.KNI_CLUSTER_CACHE ?? '/var/cache/kni-cluster', 'bin/grpc-go-client');

export interface GoClientRun { attachMs: number[]; detachMs: number[]; attachWallMs: number; detachWallMs: number; clientCpuPerAttachMs: { user: number; system: number } }

/**
 * Attaches every pod, then detaches every pod (netns ending), `concurrency` calls at a time.
 * Not spawnSync: the bench reads the daemon's log meanwhile, and a full pipe would stall it.
 */
export async function goClientAddDel(socket: string, pods: { id: string; netns: string }[], concurrency: number, workDir: string): Promise<GoClientRun> {
  if (!fs.existsSync(GO_CLIENT)) throw new Error(`${GO_CLIENT} is missing: run bash hack/cluster/build-components.sh bench-client`);
  const list = path.join(workDir, 'go-client-pods.txt');
  fs.writeFileSync(list, pods.map((p) => `${p.id} ${p.netns}\n`).join(''));
  try {
    const p = spawn(GO_CLIENT, ['-socket', socket, '-pods', list, '-concurrency', String(concurrency)], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 600_000 });
    let out = '';
    let err = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (err += b));
    const code = await new Promise<number | string>((resolve, reject) => {
      p.once('error', reject);
      p.once('close', (c, sig) => resolve(c ?? sig ?? 'unknown'));
    });
    if (code !== 0) throw new Error(`grpc-go-client failed (${code}): ${err}`);
    return JSON.parse(out) as GoClientRun;
  } finally {
    fs.rmSync(list, { force: true });
  }
}

/** The bench's name for this path. */
export const GO_PATH = 'kni gRPC, Go client';
