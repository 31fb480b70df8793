// The conflist (and, if asked, the kni-cni binary) a CNI-calling runtime needs on the host.
// The conflist is written only once the node network is ready: a runtime takes its presence
// as "network ready". Plugins others chained into it (a service mesh's istio-cni or
// linkerd-cni append theirs to the node's conflist) are kept where they are when kni writes
// it again, so a restart of kni does not take a mesh's redirection off new pods.
// `kni-runtime --uninstall` takes both away.
import fs from 'node:fs';
import path from 'node:path';
import { CniConfig } from '../../plugin/core/config';
import type { CniConfigStatus } from '../../plugin/core/runtime-types';
import { supportedVersionsSync } from '../../plugin/cni/plugin-exec';
import { cniConfFiles } from '../../plugin/cni/load-network';
import { log } from '../../plugin/core/log';
import { makeDir } from '../../plugin/sys/make-dir';
import { SUPPORTED_VERSIONS } from './cni-result';

export function conflist(cfg: CniConfig, networkName: string): Record<string, unknown> {
  return {
    cniVersion: '1.0.0',
    cniVersions: ['1.0.0', '1.1.0'],
    name: networkName,
    plugins: [
      {
        type: 'kni-cni',
        socket: cfg.socket,
        // containerd hands the pod annotations over (used to tell VM sandboxes apart).
        capabilities: { 'io.kubernetes.cri.pod-annotations': true, ips: true, mac: true, portMappings: true, bandwidth: true, cgroupPath: true },
      },
    ],
  };
}

const atomicWrite = (file: string, data: string | Buffer, mode: number) => {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.tmp`);
  fs.writeFileSync(tmp, data, { mode });
  fs.renameSync(tmp, file);
};

export function shimBinary(): string {
  return path.join(__dirname, '../../bin/kni-cni');
}

/** What installCni wrote (unchanged files are not), and the conflist the runtime now reads. */
export interface CniInstall {
  written: string[];
  conflist?: CniConfigStatus;
}

export function installCni(cfg: CniConfig, networkName: string): CniInstall {
  const written: string[] = [];
  let installed: CniConfigStatus | undefined;
  if (cfg.binDir) {
    makeDir(cfg.binDir);
    const target = path.join(cfg.binDir, 'kni-cni');
    atomicWrite(target, fs.readFileSync(shimBinary()), 0o755);
    written.push(target);
  }
  if (cfg.confDir) {
    makeDir(cfg.confDir);
    const target = kniConflist(cfg);
    const list = withChained(conflist(cfg, networkName), target, [...new Set([cfg.binDir, '/opt/cni/bin'].filter(Boolean))]);
    const text = `${JSON.stringify(list, null, 2)}\n`;
    installed = { file: target, cniVersion: [list.cniVersion, ...((list.cniVersions as string[] | undefined) ?? [])].filter((v, i, all) => all.indexOf(v) === i).join(', '), plugins: (list.plugins as { type: string }[]).map((p) => p.type) };
    // Unchanged, it is not written: a mesh's agent watching the file is not woken for nothing.
    if (readText(target) !== text) {
      atomicWrite(target, text, 0o644);
      written.push(target);
    }
  }
  return { written, ...(installed ? { conflist: installed } : {}) };
}

const readText = (file: string): string | undefined => {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
};

/** The versions kni-cni answers to, newest first: what kni's conflist may name. */
const KNI_CNI_VERSIONS = [...SUPPORTED_VERSIONS].reverse();

/**
 * kni's conflist naming a version every chained plugin supports: a plugin refuses a config of
 * a version it does not know, so a mesh plugin built before CNI 1.1 would fail every pod's ADD
 * if the runtime picked 1.1.0 from cniVersions. A plugin that cannot be asked (not in the bin
 * dirs, or no answer this time: a busy node, a binary being replaced) is taken to take what the
 * file names now (`named`): a failed VERSION must not widen the file to a version the plugin
 * was found not to take.
 */
function versionsForChain(mine: Record<string, unknown>, chained: { type: string }[], binDirs: string[], file: string, named: string[]): Record<string, unknown> {
  // Asked once per write of the conflist (at start), never on a pod's path.
  const asked = chained.map((p) => supportedVersionsSync(binDirs, p.type));
  const answers = asked.map((a) => ('versions' in a ? a.versions : undefined));
  const unknown = chained.filter((_, i) => !answers[i]).map((p) => p.type);
  const why = asked.flatMap((a, i) => ('why' in a ? [`${chained[i].type}: ${a.why}`] : []));
  if (unknown.length) log('warn', 'cannot ask plugins chained into kni\'s CNI config which CNI versions they take (not found in the CNI bin dirs, or no VERSION answer): taken to take what the file names now', { file, plugins: unknown, why, binDirs, named });
  const takes = answers.map((a) => a ?? (named.length ? named : undefined));
  const common = KNI_CNI_VERSIONS.filter((v) => takes.every((t) => !t || t.includes(v)));
  if (common.includes('1.1.0') && common.includes('1.0.0')) return mine;
  if (!common.length) {
    log('warn', 'no CNI version is taken by both kni-cni and the plugins chained into its config: kni\'s is kept', { file, plugins: chained.map((p, i) => `${p.type} ${takes[i]?.join(',') ?? '?'}`) });
    return mine;
  }
  log('info', 'kni\'s CNI config names the newest CNI version every chained plugin takes', { file, cniVersion: common[0] });
  const { cniVersions: _all, ...rest } = mine;
  void _all;
  return { ...rest, cniVersion: common[0] };
}

/**
 * kni's conflist with the plugins others chained into the one at `file` (every entry but
 * kni-cni's, in their places), in a version they all take. A file that is not a conflist
 * holding kni-cni is replaced whole.
 */
function withChained(mine: Record<string, unknown>, file: string, binDirs: string[]): Record<string, unknown> {
  const text = readText(file);
  if (text === undefined) return mine;
  let old: { plugins?: unknown; cniVersion?: unknown; cniVersions?: unknown };
  try {
    old = JSON.parse(text);
  } catch {
    log('warn', 'replacing a CNI config that is not JSON', { file });
    return mine;
  }
  const plugins = Array.isArray(old?.plugins) ? (old.plugins as unknown[]) : [];
  const at = plugins.findIndex((p) => (p as { type?: unknown } | null)?.type === 'kni-cni');
  if (at < 0) return mine;
  // Another kni-cni entry would attach the pod twice: not kept either.
  const isPlugin = (p: unknown) => typeof p === 'object' && p !== null && typeof (p as { type?: unknown }).type === 'string' && (p as { type: string }).type !== 'kni-cni';
  const others = plugins.filter((_, i) => i !== at);
  if (!others.length) return mine;
  if (!others.every(isPlugin)) log('warn', 'dropping entries chained into kni\'s CNI config that are not plugin configs (or are kni-cni again)', { file });
  const kept = others.filter(isPlugin);
  if (kept.length) log('info', 'keeping the plugins chained into kni\'s CNI config', { file, plugins: kept.map((p) => (p as { type: string }).type) });
  const own = (mine.plugins as unknown[])[0];
  const named = [old.cniVersion, ...(Array.isArray(old.cniVersions) ? old.cniVersions : [])].filter((v): v is string => typeof v === 'string' && KNI_CNI_VERSIONS.includes(v));
  const versioned = kept.length ? versionsForChain(mine, kept as { type: string }[], binDirs, file, [...new Set(named)]) : mine;
  return { ...versioned, plugins: plugins.map((p, i) => (i === at ? own : p)).filter((p, i) => i === at || isPlugin(p)) };
}

/**
 * The network config a CNI-calling runtime takes instead of kni's, if any: containerd and
 * CRI-O (through libcni) load the first of confDir's *.conf, *.conflist and *.json in name
 * order, so another plugin's file sorting first gives pods that plugin's network, silently.
 */
export function shadowingConf(cfg: CniConfig): string | undefined {
  if (!cfg.confDir) return undefined;
  const first = cniConfFiles(cfg.confDir)[0];
  return first !== undefined && first !== cfg.confName ? path.join(cfg.confDir, first) : undefined;
}

/** The conflist kni writes for the runtime ('' when it writes none). */
export const kniConflist = (cfg: CniConfig): string => (cfg.confDir ? path.join(cfg.confDir, cfg.confName) : '');

/**
 * What of kni's install is gone or changed behind its back ('' when in place): the binary's and
 * the conflist's presence, and the conflist still running kni-cni on kni's socket. A stat and a
 * read, no process (the chained plugins are asked only when kni writes the file).
 */
export function cniInstallDrift(cfg: CniConfig): string {
  const problems: string[] = [];
  const bin = cfg.binDir && path.join(cfg.binDir, 'kni-cni');
  if (bin && !fs.existsSync(bin)) problems.push(`${bin} is gone`);
  const file = kniConflist(cfg);
  const text = file ? readText(file) : undefined;
  if (file && text === undefined) problems.push(`${file} is gone`);
  else if (file) {
    let runsKni = false;
    try {
      const plugins = (JSON.parse(text!) as { plugins?: unknown }).plugins;
      runsKni = Array.isArray(plugins) && plugins.some((p) => (p as { type?: unknown } | null)?.type === 'kni-cni' && (p as { socket?: unknown }).socket === cfg.socket);
    } catch {
      // not JSON: not kni's either
    }
    if (!runsKni) problems.push(`${file} no longer runs kni-cni on ${cfg.socket}`);
  }
  return problems.join('; ');
}

export function uninstallCni(cfg: CniConfig): string[] {
  const removed: string[] = [];
  for (const f of [kniConflist(cfg), cfg.binDir && path.join(cfg.binDir, 'kni-cni')]) {
    if (f && fs.existsSync(f)) {
      fs.rmSync(f);
      removed.push(f);
    }
  }
  return removed;
}
