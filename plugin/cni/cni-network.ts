// One CNI network run the way libcni runs it: ADD through every plugin in order with the
// previous result chained in, DEL in reverse order with the cached result, CHECK in order with
// it, STATUS and plugin GC where the config's version has them; runtimeConfig built from the
// capabilities each plugin declares; the final result converted to the config's version.
import { CachedAttachment, CniResultCache } from './cni-result-cache';
import { NetworkConfList, PluginConf, versionAtLeast } from './conflist';
import { CniPluginError, execPlugin, PluginDirs } from './plugin-exec';

export interface CniRuntime {
  containerId: string;
  netns: string;
  ifName: string;
  /** CNI_ARGS. */
  args?: string;
  /** Capability name → value (portMappings, bandwidth, ips, mac, deviceID, io.kubernetes.cri.pod-annotations …). */
  capabilityArgs?: Record<string, unknown>;
  /** Given to every plugin as `args.cni` (Multus's cni-args of a selection). */
  cniArgs?: Record<string, unknown>;
  /**
   * The deviceID capability names a device the pod chose (its selection's deviceID), not one the
   * kubelet gave it: only plugins declaring the capability get it, as in Multus. Written into every
   * plugin's config, a pod could hand a plugin a device another pod holds.
   */
  podNamedDevice?: boolean;
}

/** A result in another spec version (0.3.x/0.4.0 carry ips[].version, 1.x does not; 0.1.0/0.2.0 have ip4 and ip6). */
export function convertResult(result: unknown, to: string): unknown {
  if (typeof result !== 'object' || result === null) return result;
  const from = result as Record<string, unknown>;
  const legacy = 'ip4' in from || 'ip6' in from || (typeof from.cniVersion === 'string' && !versionAtLeast(from.cniVersion, '0.3.0'));
  if (legacy && versionAtLeast(to, '0.3.0')) return convertResult(fromLegacy(from), to);
  if (legacy || !versionAtLeast(to, '0.3.0')) return legacy ? { ...from, cniVersion: to } : toLegacy(from, to);
  const r: Record<string, unknown> = { ...from, cniVersion: to };
  if (Array.isArray(r.ips)) {
    r.ips = objects(r.ips).map((ip) => {
      const { version: _v, ...rest } = ip;
      void _v;
      if (versionAtLeast(to, '1.0.0')) return rest;
      return { version: String(ip.address ?? '').includes(':') ? '6' : '4', ...rest };
    });
  }
  return r;
}

interface LegacyIp {
  ip?: string;
  gateway?: string;
  routes?: { dst?: string; gw?: string }[];
}

const isV6 = (cidr: unknown) => String(cidr ?? '').includes(':');
/** The object entries of a list a plugin returned (its output is not trusted). */
const objects = (v: unknown): Record<string, unknown>[] => (Array.isArray(v) ? v.filter((x) => typeof x === 'object' && x !== null) : []);

/** A 0.1.0/0.2.0 result (ip4, ip6) in the 1.x form, as libcni converts it: no interfaces, no index. */
function fromLegacy(r: Record<string, unknown>): Record<string, unknown> {
  const ips: Record<string, unknown>[] = [];
  const routes: unknown[] = [];
  for (const fam of [r.ip4, r.ip6] as (LegacyIp | undefined)[]) {
    if (!fam || typeof fam !== 'object' || typeof fam.ip !== 'string') continue;
    ips.push({ address: fam.ip, ...(fam.gateway ? { gateway: fam.gateway } : {}) });
    for (const rt of objects(fam.routes)) routes.push(rt.gw ? { dst: rt.dst, gw: rt.gw } : { dst: rt.dst });
  }
  return { cniVersion: '1.0.0', ips, ...(routes.length ? { routes } : {}), ...(r.dns ? { dns: r.dns } : {}) };
}

/** A 0.3.0+ result as 0.1.0/0.2.0 has it: the first address of each family, the routes by family. */
function toLegacy(r: Record<string, unknown>, to: string): Record<string, unknown> {
  const ips = objects(r.ips) as { address?: string; gateway?: string }[];
  const routes = objects(r.routes) as { dst?: string; gw?: string }[];
  const family = (v6: boolean): LegacyIp | undefined => {
    const ip = ips.find((i) => typeof i.address === 'string' && isV6(i.address) === v6);
    if (!ip) return undefined;
    const own = routes.filter((rt) => isV6(rt.dst) === v6);
    return { ip: ip.address, ...(ip.gateway ? { gateway: ip.gateway } : {}), ...(own.length ? { routes: own } : {}) };
  };
  const [ip4, ip6] = [family(false), family(true)];
  return { cniVersion: to, ...(ip4 ? { ip4 } : {}), ...(ip6 ? { ip6 } : {}), ...(r.dns ? { dns: r.dns } : {}) };
}

/** What the caller left out (netns, CNI_ARGS, capability args), as ADD had it. */
const withCached = (rt: CniRuntime, cached: CachedAttachment | undefined): CniRuntime =>
  cached ? { ...rt, netns: rt.netns || cached.netns, args: rt.args ?? cached.args, capabilityArgs: rt.capabilityArgs ?? cached.capabilityArgs, cniArgs: rt.cniArgs ?? cached.cniArgs, podNamedDevice: rt.podNamedDevice ?? cached.podNamedDevice } : rt;

export class CniNetwork {
  constructor(private current: NetworkConfList, private readonly binDirs: PluginDirs, private readonly cache: CniResultCache) {}

  get list(): NetworkConfList {
    return this.current;
  }

  /** Whether the config changed since kni read it first (the attachments before may differ). */
  reconfigured = false;

  /** A new config of the same network, for the attachments made from now on. */
  reconfigure(list: NetworkConfList): void {
    this.current = list;
    this.reconfigured = true;
  }

  /** The network an attachment was added with, from its cache entry (undefined: none cached, or cached before configs were). */
  static ofCached(cache: CniResultCache, network: string, containerId: string, ifName: string, binDirs: PluginDirs): CniNetwork | undefined {
    const config = cache.get(network, containerId, ifName)?.config;
    return config ? new CniNetwork(config, binDirs, cache) : undefined;
  }

  get name(): string {
    return this.list.name;
  }

  private pluginConfig(p: PluginConf, prevResult: unknown, rt?: CniRuntime): Record<string, unknown> {
    const conf: Record<string, unknown> = { ...p, name: this.list.name, cniVersion: this.list.cniVersion };
    const caps = Object.entries(p.capabilities ?? {}).filter(([, on]) => on).map(([k]) => k);
    const runtimeConfig: Record<string, unknown> = {};
    for (const c of caps) if (rt?.capabilityArgs?.[c] !== undefined) runtimeConfig[c] = rt.capabilityArgs[c];
    if (Object.keys(runtimeConfig).length) conf.runtimeConfig = runtimeConfig;
    // A device from the kubelet goes into every plugin's config too, as Multus puts it there:
    // SR-IOV CNI reads deviceID, host-device pciBusID; few declare the deviceID capability.
    const device = rt?.capabilityArgs?.deviceID;
    if (typeof device === 'string' && device && !rt?.podNamedDevice) Object.assign(conf, { deviceID: device, pciBusID: device });
    if (rt?.cniArgs && Object.keys(rt.cniArgs).length) conf.args = { ...(p.args as Record<string, unknown> | undefined), cni: { ...((p.args as { cni?: object } | undefined)?.cni), ...rt.cniArgs } };
    if (prevResult !== undefined) conf.prevResult = prevResult;
    return conf;
  }

  /** ADD through the chain; on a failure, DEL through the whole chain (nothing is left half made). */
  async add(rt: CniRuntime): Promise<unknown> {
    // Cached before the first plugin runs (libcni caches after): a crash part way leaves the
    // config and args a DEL needs, even when the definition is gone by then.
    this.cacheEntry(rt, null);
    let result: unknown;
    try {
      for (const p of this.list.plugins) {
        result = await execPlugin(this.binDirs, p.type, { command: 'ADD', ...this.inv(rt), args: this.addArgs(rt) }, this.pluginConfig(p, result, rt));
      }
    } catch (e) {
      await this.delChain(rt, undefined).catch(() => undefined);
      this.cache.delete(this.name, rt.containerId, rt.ifName);
      throw e;
    }
    const final = convertResult(result, this.list.cniVersion);
    this.cacheEntry(rt, final);
    return final;
  }

  /**
   * CNI_ARGS for ADD: with MAC= and IP= (the addresses joined by commas) for a mac or ips asked
   * for that no plugin of the network declares as a capability, as Multus adds them, so that
   * plugins reading them from CNI_ARGS (static and host-local IPAM, macvlan, tuning) still honour
   * the request instead of it being dropped. Declared, the capability alone carries it
   * (host-local would take IP= as one address only).
   */
  private addArgs(rt: CniRuntime): string | undefined {
    const declared = (c: string) => this.list.plugins.some((p) => p.capabilities?.[c]);
    const extra: string[] = [];
    const mac = rt.capabilityArgs?.mac;
    if (typeof mac === 'string' && mac && !declared('mac')) extra.push(`MAC=${mac}`);
    const ips = rt.capabilityArgs?.ips;
    if (Array.isArray(ips) && ips.length && !declared('ips')) extra.push(`IP=${ips.join(',')}`);
    return extra.length ? [rt.args || 'IgnoreUnknown=1', ...extra].join(';') : rt.args;
  }

  private cacheEntry(rt: CniRuntime, result: unknown): void {
    this.cache.put({ kind: 'cniCacheV1', network: this.name, containerId: rt.containerId, ifName: rt.ifName, netns: rt.netns, args: rt.args ?? '', capabilityArgs: rt.capabilityArgs ?? {}, ...(rt.cniArgs ? { cniArgs: rt.cniArgs } : {}), ...(rt.podNamedDevice ? { podNamedDevice: true } : {}), result, config: this.list });
  }

  /** A capability arg ADD ran with (undefined: none, or nothing cached). */
  cachedCapability(containerId: string, ifName: string, name: string): unknown {
    return this.cache.get(this.name, containerId, ifName)?.capabilityArgs?.[name];
  }

  /** What ADD returned for an attachment, in the config's version (undefined: none cached). */
  cachedResult(containerId: string, ifName: string): unknown {
    return this.cache.get(this.name, containerId, ifName)?.result;
  }

  /** DEL in reverse order with the cached result (also after a restart); idempotent. */
  async del(rt: CniRuntime): Promise<void> {
    const cached = this.cache.get(this.name, rt.containerId, rt.ifName);
    await this.delChain(withCached(rt, cached), cached?.result ?? undefined);
    this.cache.delete(this.name, rt.containerId, rt.ifName);
  }

  private async delChain(rt: CniRuntime, prevResult: unknown): Promise<void> {
    const prev = versionAtLeast(this.list.cniVersion, '0.4.0') ? prevResult : undefined;
    let first: unknown;
    for (const p of [...this.list.plugins].reverse()) {
      try {
        await execPlugin(this.binDirs, p.type, { command: 'DEL', ...this.inv(rt) }, this.pluginConfig(p, prev, rt));
      } catch (e) {
        first ??= e;
      }
    }
    if (first) throw first;
  }

  /** CHECK in order against the cached result (0.4.0 and later, unless disableCheck). */
  async check(rt: CniRuntime): Promise<void> {
    if (!versionAtLeast(this.list.cniVersion, '0.4.0') || this.list.disableCheck) return;
    const cached = this.cache.get(this.name, rt.containerId, rt.ifName);
    if (!cached?.result) throw new CniPluginError(this.name, 3, `no cached result for ${rt.containerId}/${rt.ifName}: it was never added (or was deleted)`);
    const full = withCached(rt, cached);
    for (const p of this.list.plugins) await execPlugin(this.binDirs, p.type, { command: 'CHECK', ...this.inv(full) }, this.pluginConfig(p, cached.result, full));
  }

  /** STATUS through every plugin (1.1.0 and later; earlier versions have none: ready). */
  async status(): Promise<void> {
    if (!versionAtLeast(this.list.cniVersion, '1.1.0')) return;
    for (const p of this.list.plugins) await execPlugin(this.binDirs, p.type, { command: 'STATUS' }, this.pluginConfig(p, undefined));
  }

  /**
   * GC as libcni does it: DEL every cached attachment not in `valid` (any version), then the
   * plugins' own GC with the valid list (1.1.0 and later, unless disableGC). Returns what was deleted.
   */
  async gc(valid: { containerId: string; ifName: string }[]): Promise<string[]> {
    const keep = new Set(valid.map((v) => `${v.containerId}/${v.ifName}`));
    const deleted: string[] = [];
    for (const a of this.cache.list(this.name)) {
      if (keep.has(`${a.containerId}/${a.ifName}`)) continue;
      await this.del({ containerId: a.containerId, ifName: a.ifName, netns: a.netns, args: a.args, capabilityArgs: a.capabilityArgs, cniArgs: a.cniArgs, podNamedDevice: a.podNamedDevice }).catch(() => undefined);
      deleted.push(a.containerId);
    }
    if (versionAtLeast(this.list.cniVersion, '1.1.0') && !this.list.disableGC) {
      const attachments = valid.map((v) => ({ containerID: v.containerId, ifname: v.ifName }));
      for (const p of this.list.plugins) await execPlugin(this.binDirs, p.type, { command: 'GC' }, { ...this.pluginConfig(p, undefined), 'cni.dev/valid-attachments': attachments });
    }
    return deleted;
  }

  private inv(rt: CniRuntime) {
    return { containerId: rt.containerId, netns: rt.netns, ifName: rt.ifName, args: rt.args };
  }
}
