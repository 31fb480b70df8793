// A CNI network configuration as libcni reads it: a conflist ({cniVersion, name, plugins}) or a
// single plugin config (.conf, wrapped as a one-plugin list). Checked whole: every problem named.
export const CNI_VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];

export interface PluginConf {
  type: string;
  capabilities?: Record<string, boolean>;
  [key: string]: unknown;
}

export interface NetworkConfList {
  cniVersion: string;
  name: string;
  disableCheck: boolean;
  disableGC: boolean;
  plugins: PluginConf[];
}

export class CniConfigError extends Error {}

/** Compares CNI versions ("0.4.0" < "1.0.0"). */
export function versionAtLeast(v: string, min: string): boolean {
  const a = v.split('.').map(Number);
  const b = min.split('.').map(Number);
  for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0);
  return true;
}

export function parseNetworkConfig(text: string, source: string): NetworkConfList {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new CniConfigError(`${source}: not JSON: ${(e as Error).message}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new CniConfigError(`${source}: not a JSON object`);
  const r = raw as Record<string, unknown>;
  const problems: string[] = [];
  const single = r.plugins === undefined && typeof r.type === 'string';
  if (typeof r.cniVersion !== 'string' || !CNI_VERSIONS.includes(r.cniVersion)) problems.push(`cniVersion ${JSON.stringify(r.cniVersion)} is not one of ${CNI_VERSIONS.join(', ')}`);
  if (typeof r.name !== 'string' || !/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/.test(r.name)) problems.push(`name ${JSON.stringify(r.name)} is not a network name (letters, digits, _ . -)`);
  const plugins = single ? [r] : r.plugins;
  if (!Array.isArray(plugins) || plugins.length === 0 || plugins.length > 32) problems.push('plugins must list 1 to 32 plugin configs');
  else {
    plugins.forEach((p, i) => {
      if (typeof p !== 'object' || p === null || Array.isArray(p)) return void problems.push(`plugins[${i}] is not an object`);
      const pc = p as Record<string, unknown>;
      if (typeof pc.type !== 'string' || !/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$/.test(pc.type)) problems.push(`plugins[${i}].type ${JSON.stringify(pc.type)} is not a plugin binary name`);
      if (pc.capabilities !== undefined && (typeof pc.capabilities !== 'object' || pc.capabilities === null || Array.isArray(pc.capabilities) || Object.values(pc.capabilities).some((v) => typeof v !== 'boolean'))) {
        problems.push(`plugins[${i}].capabilities must map capability names to true or false`);
      }
    });
  }
  for (const k of ['disableCheck', 'disableGC'] as const) if (r[k] !== undefined && typeof r[k] !== 'boolean') problems.push(`${k} must be true or false`);
  if (problems.length) throw new CniConfigError(`${source}: ${problems.join('; ')}`);
  return {
    cniVersion: r.cniVersion as string,
    name: r.name as string,
    disableCheck: (r.disableCheck as boolean) ?? false,
    disableGC: (r.disableGC as boolean) ?? false,
    plugins: (plugins as PluginConf[]).map((p) => {
      // A single .conf carries name and cniVersion itself: the list's copy wins when invoking.
      const { cniVersion: _v, name: _n, ...rest } = p as Record<string, unknown>;
      void _v;
      void _n;
      return rest as PluginConf;
    }),
  };
}
