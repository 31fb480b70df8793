// Network definitions from files, for kni without Kubernetes: networks.dir holds CNI configs or
// conflists (.conf, .conflist, .json) named after the network; files directly in the
// directory are in namespace "default", files in a subdirectory in the namespace it names.
import fs from 'node:fs';
import path from 'node:path';
import { NetworkDefinition, parseDefinition } from './network-definitions';
import { DNS_LABEL, DNS_SUBDOMAIN } from './network-selection';

const EXT = /\.(conf|conflist|json)$/;
const MAX_FILE = 1 << 20;

export function scanNetworkDir(dir: string, ipamDataDir: string): NetworkDefinition[] {
  const out: NetworkDefinition[] = [];
  const read = (file: string, namespace: string) => {
    const name = path.basename(file).replace(EXT, '');
    if (!DNS_SUBDOMAIN.test(name)) return;
    let text = '';
    let error = '';
    try {
      if (fs.statSync(file).size > MAX_FILE) error = `${file} is larger than 1 MiB`;
      else text = fs.readFileSync(file, 'utf8');
    } catch (e) {
      error = `cannot read ${file}: ${(e as Error).message}`;
    }
    const def = error ? { namespace, name, source: 'file' as const, origin: file, error } : parseDefinition(namespace, name, 'file', file, text, ipamDataDir);
    out.push(def);
  };
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return out; // no directory: no file definitions
  }
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isFile() && EXT.test(e.name)) read(p, 'default');
    else if (e.isDirectory() && DNS_LABEL.test(e.name)) {
      for (const f of fs.readdirSync(p, { withFileTypes: true })) if (f.isFile() && EXT.test(f.name)) read(path.join(p, f.name), e.name);
    }
  }
  return out;
}
