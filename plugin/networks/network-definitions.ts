// The network definitions kni knows: NetworkAttachmentDefinitions from the API server and, the
// same without Kubernetes, files in networks.dir. Each is a CNI config or conflist, parsed
// when it arrives; one that does not parse is kept with its error, so a pod asking for it fails
// with that reason (and not "not found"). The API's definition wins over a file of the same name.
import { CniConfigError, NetworkConfList, parseNetworkConfig } from '../cni/conflist';

export type DefinitionSource = 'api' | 'file';

export interface NetworkDefinition {
  namespace: string;
  name: string;
  source: DefinitionSource;
  /** Where exactly: the file's path, or the object's uid and resourceVersion. */
  origin: string;
  config?: NetworkConfList;
  error?: string;
  /**
   * The device plugin resource each attachment takes one device of
   * (k8s.v1.cni.cncf.io/resourceName, as SR-IOV networks name their pool of VFs).
   */
  resourceName?: string;
}

export const RESOURCE_NAME_ANNOTATION = 'k8s.v1.cni.cncf.io/resourceName';

/** An extended resource's name as device plugins register it: vendor-domain/name. */
export function resourceNameProblem(v: unknown): string {
  const ok = typeof v === 'string' && /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/.test(v);
  return ok ? '' : `metadata.annotations["${RESOURCE_NAME_ANNOTATION}"] ${JSON.stringify(v).slice(0, 300)} is not a device plugin resource name (vendor.example/name)`;
}

/**
 * Parses a definition's config; one without a name takes the definition's, as in Multus (its
 * quick start's macvlan definition has none). host-local IPAM without a dataDir keeps its leases under kni's
 * state dir (not /var/lib/cni/networks): they survive kni's container and are not sprayed on
 * the host.
 */
export function parseDefinition(namespace: string, name: string, source: DefinitionSource, origin: string, text: string, ipamDataDir: string): NetworkDefinition {
  const def: NetworkDefinition = { namespace, name, source, origin };
  if (!text.trim()) {
    def.error = 'spec.config is empty (kni does not read network configs from the node\'s disk)';
    return def;
  }
  try {
    const config = parseNetworkConfig(text, `network ${namespace}/${name}`, name);
    for (const p of config.plugins) {
      const ipam = p.ipam as Record<string, unknown> | undefined;
      if (ipam && typeof ipam === 'object' && ipam.type === 'host-local' && ipam.dataDir === undefined) p.ipam = { ...ipam, dataDir: ipamDataDir };
    }
    def.config = config;
  } catch (e) {
    def.error = e instanceof CniConfigError ? e.message : String(e);
  }
  return def;
}

export class NetworkDefinitions {
  private readonly bySource: Record<DefinitionSource, Map<string, NetworkDefinition>> = { api: new Map(), file: new Map() };
  private listeners: (() => void)[] = [];

  constructor(readonly ipamDataDir: string) {}

  get(key: string): NetworkDefinition | undefined {
    return this.bySource.api.get(key) ?? this.bySource.file.get(key);
  }

  list(): NetworkDefinition[] {
    const out = new Map(this.bySource.file);
    for (const [k, d] of this.bySource.api) out.set(k, d);
    return [...out.values()].sort((a, b) => (`${a.namespace}/${a.name}` < `${b.namespace}/${b.name}` ? -1 : 1));
  }

  set(def: NetworkDefinition): void {
    this.bySource[def.source].set(`${def.namespace}/${def.name}`, def);
    this.changed();
  }

  delete(source: DefinitionSource, key: string): void {
    if (this.bySource[source].delete(key)) this.changed();
  }

  /** Everything one source holds, at once (a directory scan, an API re-list). */
  replace(source: DefinitionSource, defs: NetworkDefinition[]): void {
    const next = new Map(defs.map((d) => [`${d.namespace}/${d.name}`, d]));
    const same = next.size === this.bySource[source].size && [...next].every(([k, d]) => JSON.stringify(this.bySource[source].get(k)) === JSON.stringify(d));
    this.bySource[source] = next;
    if (!same) this.changed();
  }

  /** Calls cb after every change (dynamic networks retry pods waiting for a definition). */
  onChange(cb: () => void): void {
    this.listeners.push(cb);
  }

  private changed(): void {
    for (const cb of this.listeners) cb();
  }
}
