// The network namespaces kni itself makes (the KNI POC flow where the network runtime creates
// the pod's netns): pinned under netnsDir, recorded before the pin so a crash leaves no
// unrecorded pin, released with their sandbox or by path.
import crypto from 'node:crypto';
import { KniError, invalid } from './errors';
import { log } from './log';
import type { Config } from './config';
import type { NetnsPool } from '../netns/netns-pool';
import type { EntryPoint } from '../observe/metrics';
import type { StateStore } from '../store/state-store';
import { NetnsRecord, PodRef, SandboxRecord } from '../store/records';
import * as validate from './validate';
import { createPinnedNetns, removePinnedNetns } from '../netns/netns';

/** What the netns kni makes use of the runtime. */
export interface NetnsParts {
  readonly cfg: Pick<Config, 'netnsDir'>;
  readonly store: StateStore;
  readonly netns: Map<string, NetnsRecord>;
  readonly sandboxes: ReadonlyMap<string, SandboxRecord>;
  readonly netnsPool: Pick<NetnsPool, 'take'>;
  podRef(pod?: Partial<PodRef>): PodRef;
  detach(sandboxId: string, releaseNetns?: boolean, entryPoint?: EntryPoint, netnsEnding?: boolean): Promise<boolean>;
}

/** A new netns, pinned in netnsDir, recorded as kni's (KNI CreateNetwork). */
export async function createNetwork(rt: NetnsParts, pod: Partial<PodRef>): Promise<NetnsRecord> {
  const ref = rt.podRef(pod);
  const name = `kni-${crypto.randomBytes(8).toString('hex')}`;
  const rec: NetnsRecord = { name, path: `${rt.cfg.netnsDir}/${name}`, pod: ref, sandboxId: '', createdAt: new Date().toISOString() };
  // Recorded first, so a crash before the pin leaves a record (dropped at start), never a pin.
  rt.store.netns.put(name, rec);
  try {
    // One made ahead when there is one (plugin/netns/netns-pool.ts): a bind mount instead of the kernel making a netns now.
    createPinnedNetns(rt.cfg.netnsDir, name, rt.netnsPool.take());
  } catch (e) {
    rt.store.netns.delete(name);
    throw new KniError('INTERNAL', `cannot create network namespace ${rec.path}: ${(e as Error).message}`);
  }
  rt.netns.set(name, rec);
  log('info', 'netns created', { netns: rec.path, pod: ref });
  return rec;
}

/**
 * Releases what a sandbox holds and the netns kni made for it (by id or by path). The caller
 * is tearing the sandbox down (the containerd fork removes its own netns next), so the answer
 * does not wait for the kernel's veth delete.
 */
export async function deleteNetwork(rt: NetnsParts, sandboxId: string, netnsPath: string): Promise<void> {
  if (!sandboxId && !netnsPath) throw invalid('neither a sandbox id nor a netns path was given');
  if (sandboxId) {
    validate.sandboxId(sandboxId);
    await rt.detach(sandboxId, true, 'kni', true);
  }
  if (netnsPath && (typeof netnsPath !== 'string' || netnsPath.length > 4096)) throw invalid('netns path is not a valid path');
  // Only a path given: what was attached in that netns is released now, not at the next reconcile.
  if (netnsPath) {
    for (const rec of [...rt.sandboxes.values()]) if (rec.netnsPath === netnsPath) await rt.detach(rec.id, true, 'kni', true);
  }
  for (const n of [...rt.netns.values()]) {
    if ((sandboxId && n.sandboxId === sandboxId) || (netnsPath && n.path === netnsPath)) releaseNetns(rt, n);
  }
}

/** Unpins a netns kni made and forgets it. */
export function releaseNetns(rt: Pick<NetnsParts, 'store' | 'netns'>, n: NetnsRecord): void {
  removePinnedNetns(n.path);
  rt.store.netns.delete(n.name);
  rt.netns.delete(n.name);
  log('info', 'netns released', { netns: n.path });
}
