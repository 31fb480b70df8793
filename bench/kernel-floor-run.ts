// Runs bench/kernel-floor (built by hack/setup.sh) for n pods: their netns made first, as a
// runtime makes them, and dropped after.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createPinnedNetns, removePinnedNetns } from '../plugin/netns/netns';
import { packageRoot } from '../plugin/server/protos';
import type { PodWiring } from '../plugin/core/config';
import type { CpuMs } from './stats';

const FLOOR = path.join(packageRoot(), 'dist/bin/kernel-floor');

export interface FloorRun { attachMs: number[]; detachMs: number[]; groupDeleteMs: number; attachCpuMs: CpuMs }

/**
 * n attaches then n detaches on kni's bridge (kni0, in the current netns), or routed as kni's
 * podLink "routed" wires them; dir holds the netns pins. `keep`: the netns stay until drop()
 * (the kernel dismantles a dropped netns in the background, under locks the next attaches need).
 * `gapUs`: an untimed sleep before each attach, as kni's daemon waits for its client's next call.
 */
export function floorRun(dir: string, n: number, keep = false, podLink: PodWiring = 'bridge', gapUs = 0): FloorRun & { drop(): void } {
  fs.mkdirSync(dir, { recursive: true });
  const pins = Array.from({ length: n }, (_, i) => createPinnedNetns(dir, `floor${i}`));
  const drop = () => {
    pins.splice(0).forEach(removePinnedNetns);
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    const r = spawnSync(FLOOR, ['kni0', dir, String(n), ...(podLink === 'routed' ? ['routed'] : []), ...(gapUs > 0 ? [`gap=${Math.round(gapUs)}`] : [])], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`kernel-floor failed: ${r.stderr}`);
    return { ...(JSON.parse(r.stdout) as FloorRun), drop };
  } catch (e) {
    drop();
    throw e;
  } finally {
    if (!keep) drop();
  }
}
