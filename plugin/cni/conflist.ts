// A CNI network configuration as libcni reads it: a conflist ({cniVersion, name, plugins}, and
// CNI 1.1's cniVersions) or a single plugin config (.conf, wrapped as a one-plugin list).
// Checked whole: every problem named.
export const CNI_VERSIONS = ['0.1.0', '0.2.0', '0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];

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

/**
 * `unnamed`: the name a config without one (or with "") takes, as Multus gives a
 * NetworkAttachmentDefinition's config its object's name; none: a name is required, as libcni's.
 */
export function parseNetworkConfig(text: string, source: string, unnamed?: string): NetworkConfList {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new CniConfigError(`${source}: not JSON: ${(e as Error).message}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new CniConfigError(`${source}: not a JSON object`);
  const r = raw as Record<string, unknown>;
  if (unnamed && (r.name === undefined || r.name === '')) r.name = unnamed;
  const problems: string[] = [];
  const single = r.plugins === undefined && typeof r.type === 'string';
  const cniVersion = chosenVersion(r, problems);
  if (cniVersion !== null && !CNI_VERSIONS.includes(cniVersion)) problems.push(`cniVersion ${JSON.stringify(cniVersion)} is not one of ${CNI_VERSIONS.join(', ')}`);
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
  const [disableCheck, disableGC] = (['disableCheck', 'disableGC'] as const).map((k) => flag(r[k], k, problems));
  if (problems.length) throw new CniConfigError(`${source}: ${problems.join('; ')}`);
  return {
    cniVersion: cniVersion!,
    name: r.name as string,
    disableCheck,
    disableGC,
    plugins: (plugins as PluginConf[]).map((p) => {
      // A single .conf carries name and cniVersion itself: the list's copy wins when invoking.
      const { cniVersion: _v, name: _n, ...rest } = p as Record<string, unknown>;
      void _v;
      void _n;
      return rest as PluginConf;
    }),
  };
}

const SEMVER = /^\d{1,9}\.\d{1,9}\.\d{1,9}$/;
const LATEST = CNI_VERSIONS[CNI_VERSIONS.length - 1];

/**
 * The version the plugins are run with, as libcni picks it: with cniVersions (CNI 1.1), the
 * highest of it and cniVersion that is not later than the latest kni speaks (later ones are a
 * newer runtime's to use); else cniVersion. null when a problem was pushed.
 */
function chosenVersion(r: Record<string, unknown>, problems: string[]): string | null {
  const refuse = (problem: string): null => {
    problems.push(problem);
    return null;
  };
  const one = r.cniVersion;
  if (one !== undefined && typeof one !== 'string') return refuse(`cniVersion ${JSON.stringify(one)} is not a version string`);
  const list = r.cniVersions;
  // None at all: the plugins read it as 0.1.0 (libcni's decoder, and Multus through it, run such a config).
  if (list === undefined) return one === undefined || one === '' ? '0.1.0' : one;
  if (!Array.isArray(list) || list.length > 32 || list.some((v) => typeof v !== 'string' || !SEMVER.test(v))) return refuse('cniVersions must list versions like "1.1.0"');
  const candidates = [...(list as string[]), ...(one && SEMVER.test(one) ? [one] : [])].filter((v) => versionAtLeast(LATEST, v));
  if (!candidates.length) return refuse(`cniVersions ${JSON.stringify(list)} and cniVersion name no version up to ${LATEST}`);
  return candidates.reduce((a, b) => (versionAtLeast(a, b) ? a : b));
}

/** disableCheck and disableGC: a boolean, or "true"/"false" in any case as libcni also takes. */
function flag(v: unknown, key: string, problems: string[]): boolean {
  if (v === undefined || typeof v === 'boolean') return v ?? false;
  if (typeof v === 'string' && /^(true|false)$/i.test(v)) return v.toLowerCase() === 'true';
  problems.push(`${key} must be true or false`);
  return false;
}
