// The CNI network of defaultNetwork.cni, read and checked when kni starts: a bad file stops
// kni with every problem named, as a bad config file does. Changed later (the network's own
// agent rewrites its file, as Multus watches its delegate's), it is read again for new pods;
// pods already wired are deleted with the config their ADD ran with (the result cache has it).
import fs from 'node:fs';
import path from 'node:path';
import { ConfigError, DefaultNetworkConfig } from '../core/config';
import { CniNetwork } from './cni-network';
import { CniResultCache } from './cni-result-cache';
import { CniConfigError, parseNetworkConfig } from './conflist';

/** `file`: defaultNetwork.cni's path, or the config "auto" found. */
export function loadCniNetwork(file: string, d: DefaultNetworkConfig, cacheDir: string): CniNetwork {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(`defaultNetwork.cni: cannot read ${file}: ${(e as Error).message}`);
  }
  try {
    return new CniNetwork(parseNetworkConfig(text, file), d, new CniResultCache(cacheDir));
  } catch (e) {
    throw e instanceof CniConfigError ? new ConfigError(`defaultNetwork.cni: ${e.message}`) : e;
  }
}

/** What a look at the file found: unchanged, a new config for new pods, or a problem (the old one stays). */
export type Reload = { changed: false } | { changed: true; problem?: string };

/** Reads defaultNetwork.cni again when its size or mtime moved since the last look. */
export class DefaultNetworkFile {
  private seen: string;

  constructor(private readonly net: CniNetwork, readonly file: string) {
    this.seen = this.stamp();
  }

  private stamp(): string {
    const st = fs.statSync(this.file, { throwIfNoEntry: false });
    return st ? `${st.size}:${st.mtimeMs}:${st.ino}` : 'missing';
  }

  look(): Reload {
    const now = this.stamp();
    if (now === this.seen) return { changed: false };
    this.seen = now;
    try {
      const list = parseNetworkConfig(fs.readFileSync(this.file, 'utf8'), this.file);
      if (list.name !== this.net.name) return { changed: true, problem: `its network name changed from ${this.net.name} to ${list.name}: the pods' cached attachments are under the old name; restart kni to take it` };
      this.net.reconfigure(list);
      return { changed: true };
    } catch (e) {
      return { changed: true, problem: (e as Error).message };
    }
  }
}

/**
 * The network configs in a CNI conf dir in the order containerd and CRI-O (through libcni) load
 * them: its *.conf, *.conflist and *.json by name. None when the dir cannot be read.
 */
export function cniConfFiles(confDir: string): string[] {
  try {
    return fs.readdirSync(confDir).filter((n) => /\.(conf|conflist|json)$/.test(n)).sort();
  } catch {
    return [];
  }
}

/**
 * defaultNetwork.cni "auto": the first CNI config in the runtime's conf dir by name (.conf,
 * .conflist, .json, as libcni orders them) that is not kni's own: the cluster network's, as
 * Multus's auto-generated config finds it. undefined: none there yet.
 */
export function clusterNetworkConf(confDir: string, ownName: string): string | undefined {
  const candidates = cniConfFiles(confDir).filter((n) => n !== ownName && !n.startsWith('.'));
  // A kni conflist under another name (a confName changed since) would have kni call itself.
  return candidates.map((n) => path.join(confDir, n)).find((f) => !runsKniCni(f));
}

function runsKniCni(file: string): boolean {
  try {
    const c = JSON.parse(fs.readFileSync(file, 'utf8')) as { type?: unknown; plugins?: { type?: unknown }[] };
    return c.type === 'kni-cni' || (Array.isArray(c.plugins) && c.plugins.some((p) => p?.type === 'kni-cni'));
  } catch {
    return false;
  }
}
