// Garbage collection: release what the runtime no longer has (its live sandbox list, from CNI
// GC, NRI Synchronize, CRI or the GarbageCollect RPC) and the netns kni made that nobody claims.
import { log } from './log';
import type { Config } from './config';
import { NetnsParts, releaseNetns } from './owned-netns';
import * as validate from './validate';
import { EntryPoint, gcReleasedTotal } from '../observe/metrics';

/** What garbage collection uses of the runtime. */
export interface GcParts extends NetnsParts {
  readonly cfg: Pick<Config, 'netnsDir' | 'unclaimedNetnsGraceSeconds'>;
}

export interface GcResult {
  releasedSandboxes: string[];
  releasedNetns: string[];
}

/**
 * Releases every sandbox not in the live set, and the netns kni made that nothing claims.
 * graceMs spares sandboxes attached more recently than that: a runtime lists a sandbox only
 * once its network is up, so a fresh one can be missing from a list taken at the same time.
 * only: judge just the sandboxes that entry point attached (a CNI GC lists its own).
 */
export async function collectGarbage(rt: GcParts, live: string[], graceMs = 0, only?: EntryPoint): Promise<GcResult> {
  const liveSet = new Set(live.map((id) => validate.sandboxId(id, 'live sandbox id')));
  const releasedSandboxes: string[] = [];
  const releasedOwned: string[] = [];
  const cutoff = Date.now() - graceMs;
  for (const [id, rec] of [...rt.sandboxes.entries()]) {
    if (liveSet.has(id) || Date.parse(rec.createdAt) > cutoff) continue;
    if (only && (rec.entryPoint ?? 'kni') !== only) continue;
    const ownedPath = rt.netns.get(rec.ownedNetns)?.path;
    // The runtime no longer has the sandbox: its netns is gone or going.
    if (await rt.detach(id, true, 'gc', true)) {
      releasedSandboxes.push(id);
      if (ownedPath) releasedOwned.push(ownedPath);
    }
  }
  gcReleasedTotal.inc({ object: 'netns' }, releasedOwned.length);
  const releasedNetns = [...releasedOwned, ...sweepUnclaimedNetns(rt, liveSet)];
  gcReleasedTotal.inc({ object: 'sandbox' }, releasedSandboxes.length);
  if (releasedSandboxes.length || releasedNetns.length) log('info', 'garbage collected', { sandboxes: releasedSandboxes, netns: releasedNetns });
  return { releasedSandboxes, releasedNetns };
}

/** Netns kni created whose sandbox is gone, or that no attach claimed within the grace time. */
export function sweepUnclaimedNetns(rt: GcParts, live?: Set<string>): string[] {
  const released: string[] = [];
  const cutoff = Date.now() - rt.cfg.unclaimedNetnsGraceSeconds * 1000;
  for (const n of [...rt.netns.values()]) {
    const orphan = n.sandboxId
      ? live !== undefined && !live.has(n.sandboxId) && !rt.sandboxes.has(n.sandboxId)
      : Date.parse(n.createdAt) < cutoff;
    if (!orphan) continue;
    releaseNetns(rt, n);
    released.push(n.path);
  }
  gcReleasedTotal.inc({ object: 'netns' }, released.length);
  return released;
}
