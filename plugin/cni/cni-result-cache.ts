// libcni's result cache, kept in kni's state dir: what ADD returned for (network, container,
// interface), so DEL and CHECK get it as prevResult — also after a kni restart. Written by
// rename (a crash leaves the old file or the new one).
import fs from 'node:fs';
import path from 'node:path';
import type { NetworkConfList } from './conflist';
import { makeDir } from '../sys/make-dir';

export interface CachedAttachment {
  kind: 'cniCacheV1';
  network: string;
  containerId: string;
  ifName: string;
  netns: string;
  args: string;
  capabilityArgs: Record<string, unknown>;
  /** `args.cni` given to every plugin (a selection's cni-args). */
  cniArgs?: Record<string, unknown>;
  /** The deviceID capability is the pod's own choice (CniRuntime.podNamedDevice). */
  podNamedDevice?: boolean;
  result: unknown;
  /** The config ADD ran with (as libcni caches it): DEL and GC use it after the definition changed or went away. */
  config?: NetworkConfList;
}

const safe = (s: string): string => s.replace(/[^A-Za-z0-9_.-]/g, '_');

export class CniResultCache {
  constructor(private readonly dir: string) {}

  private file(network: string, containerId: string, ifName: string): string {
    return path.join(this.dir, `${safe(network)}-${safe(containerId)}-${safe(ifName)}.json`);
  }

  put(a: CachedAttachment): void {
    makeDir(this.dir, 0o700);
    const f = this.file(a.network, a.containerId, a.ifName);
    fs.writeFileSync(`${f}.tmp`, JSON.stringify(a));
    fs.renameSync(`${f}.tmp`, f);
  }

  get(network: string, containerId: string, ifName: string): CachedAttachment | undefined {
    try {
      const a = JSON.parse(fs.readFileSync(this.file(network, containerId, ifName), 'utf8')) as CachedAttachment;
      return a.kind === 'cniCacheV1' ? a : undefined;
    } catch {
      return undefined;
    }
  }

  delete(network: string, containerId: string, ifName: string): void {
    fs.rmSync(this.file(network, containerId, ifName), { force: true });
  }

  /** Every cached attachment of a network (all networks: ''). */
  list(network: string): CachedAttachment[] {
    let names: string[];
    try {
      names = fs.readdirSync(this.dir);
    } catch {
      return [];
    }
    const out: CachedAttachment[] = [];
    for (const n of names) {
      if (!n.endsWith('.json') || (network && !n.startsWith(`${safe(network)}-`))) continue;
      try {
        const a = JSON.parse(fs.readFileSync(path.join(this.dir, n), 'utf8')) as CachedAttachment;
        if (a.kind === 'cniCacheV1' && (!network || a.network === network)) out.push(a);
      } catch {
        // a torn file: the attachment is treated as unknown
      }
    }
    return out;
  }
}
