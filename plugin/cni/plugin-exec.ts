// Executing one CNI plugin binary as the spec says: the CNI_* environment, the config on stdin,
// a result or an error object on stdout. Found on the configured plugin directories.
import { execFile, spawnSync, SpawnSyncReturns } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { cniPluginSeconds } from '../observe/metrics';

export interface CniInvocation {
  command: 'ADD' | 'DEL' | 'CHECK' | 'STATUS' | 'GC' | 'VERSION';
  containerId?: string;
  netns?: string;
  ifName?: string;
  /** CNI_ARGS: "K=V;K=V". */
  args?: string;
}

/** A plugin's failure: its error object (code, msg, details) or what went wrong running it. */
export class CniPluginError extends Error {
  constructor(readonly plugin: string, readonly code: number, readonly msg: string, readonly details = '') {
    super(`CNI plugin ${plugin}: ${msg}${details ? ` (${details})` : ''}`);
  }
}

const TIMEOUT_MS = 60_000;
const VERSION_TIMEOUT_MS = 10_000;
/** coreutils' chroot(8): chroot(2), then exec in place (the plugin keeps its pid, stdin and env). */
const CHROOT = '/usr/sbin/chroot';

/**
 * Where plugins are looked up: binDirs in order; with chrootDir (the host's root as mounted in
 * kni's container, Multus thick's chrootDir), each directory under it first: a plugin found
 * there runs chrooted in it, seeing the host's files and sockets (Open vSwitch's, the dhcp
 * daemon's, SR-IOV CNI's cache), and one found only in kni's own root (its image's plugins)
 * runs there.
 */
export interface PluginDirs {
  binDirs: string[];
  chrootDir?: string;
}

const executable = (f: string) => {
  try {
    fs.accessSync(f, fs.constants.X_OK);
    return fs.statSync(f).isFile();
  } catch {
    return false;
  }
};

/**
 * Whether `file` (a path as the host sees it) is an executable file under `root`: a symlink's
 * absolute target is the host's, so it is followed under root too (kni's own root would be wrong).
 */
function executableUnder(root: string, file: string): boolean {
  let p = file;
  for (let hops = 0; hops < 16; hops++) {
    const st = fs.lstatSync(path.join(root, p), { throwIfNoEntry: false });
    if (!st) return false;
    if (!st.isSymbolicLink()) return executable(path.join(root, p));
    const target = fs.readlinkSync(path.join(root, p));
    p = path.isAbsolute(target) ? target : path.join(path.dirname(p), target);
  }
  return false;
}

export function findPlugin(where: PluginDirs, type: string): { file: string; chroot?: string } {
  const { binDirs, chrootDir } = where;
  if (chrootDir && !fs.statSync(chrootDir, { throwIfNoEntry: false })?.isDirectory()) {
    throw new CniPluginError(type, 7, `defaultNetwork.chrootDir ${chrootDir} is not a directory: mount the host's root there (kind-config/kni-daemonset.yaml mounts it at /host), or leave the setting out`);
  }
  for (const d of binDirs) {
    if (chrootDir && executableUnder(chrootDir, path.join(d, type))) {
      if (!executable(CHROOT)) throw new CniPluginError(type, 7, `${type} is on the host (${path.join(chrootDir, d)}) but kni's root has no ${CHROOT} to run it there (coreutils; kni's image has it)`);
      return { file: path.join(d, type), chroot: chrootDir };
    }
    if (executable(path.join(d, type))) return { file: path.join(d, type) };
  }
  const dirs = binDirs.join(', ') || '(no plugin directory configured)';
  throw new CniPluginError(type, 7, `no executable ${type} in ${dirs}${chrootDir ? ` (under ${chrootDir} nor in kni's own root)` : ''}`);
}

/** Runs one plugin; resolves with its parsed stdout (undefined when empty). */
export function execPlugin(where: PluginDirs, type: string, inv: CniInvocation, stdin: unknown): Promise<unknown> {
  const { file, chroot } = findPlugin(where, type);
  const env: Record<string, string> = {
    CNI_COMMAND: inv.command,
    CNI_PATH: where.binDirs.join(':'),
    PATH: process.env.PATH || '/usr/sbin:/usr/bin:/sbin:/bin',
  };
  if (inv.containerId !== undefined) env.CNI_CONTAINERID = inv.containerId;
  if (inv.netns !== undefined) env.CNI_NETNS = inv.netns;
  if (inv.ifName !== undefined) env.CNI_IFNAME = inv.ifName;
  if (inv.args) env.CNI_ARGS = inv.args;
  const started = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    const child = execFile(chroot ? CHROOT : file, chroot ? [chroot, file] : [], { env, timeout: TIMEOUT_MS, maxBuffer: 4 * 1024 * 1024 }, (err, stdout, stderr) => {
      cniPluginSeconds.observe({ plugin: type, command: inv.command, result: err ? 'error' : 'ok' }, Number(process.hrtime.bigint() - started) / 1e9);
      let out: unknown;
      try {
        out = stdout.trim() ? JSON.parse(stdout) : undefined;
      } catch {
        out = undefined;
      }
      if (!err) return resolve(out);
      const e = out as { code?: unknown; msg?: unknown; details?: unknown } | undefined;
      if (e && typeof e.code === 'number' && typeof e.msg === 'string') return reject(new CniPluginError(type, e.code, e.msg, typeof e.details === 'string' ? e.details : ''));
      const killed = (err as { killed?: boolean }).killed;
      reject(new CniPluginError(type, 999, killed ? `did not answer ${inv.command} within ${TIMEOUT_MS / 1000} s` : `${inv.command} failed: ${(stderr || stdout || err.message).trim().slice(0, 500)}`));
    });
    // A plugin that exits without reading all of its config (one that fails at once) closes
    // the pipe: the write fails with EPIPE, which with no listener would be thrown from the
    // event loop and end the daemon. Its exit status and output say what happened.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(JSON.stringify(stdin));
  });
}

/**
 * The versions a plugin answers VERSION with (supportedVersions), or why it could not be asked
 * (not in binDirs, no answer, an answer without them). Synchronous, for when kni writes its
 * conflist (at start, never on a pod's path).
 */
export function supportedVersionsSync(binDirs: string[], type: string): VersionAnswer {
  let file: string;
  try {
    file = findPlugin({ binDirs }, type).file;
  } catch (e) {
    return { why: e instanceof CniPluginError ? e.msg : String(e) };
  }
  return versionAnswer(spawnSync(file, [], { env: { CNI_COMMAND: 'VERSION', CNI_PATH: binDirs.join(':') }, input: '{"cniVersion":"0.4.0"}', encoding: 'utf8', timeout: VERSION_TIMEOUT_MS, stdio: ['pipe', 'pipe', 'ignore'] }));
}

export type VersionAnswer = { versions: string[] } | { why: string };

/** What one VERSION run said. */
export function versionAnswer(r: Pick<SpawnSyncReturns<string>, 'error' | 'status' | 'signal' | 'stdout'>): VersionAnswer {
  const err = r.error as NodeJS.ErrnoException | undefined;
  // A plugin that answers without reading its stdin may be gone before its input is written
  // (EPIPE, seen on a busy node): its exit status and answer are what count.
  if (err && err.code !== 'EPIPE') return { why: err.code === 'ETIMEDOUT' ? `no VERSION answer within ${VERSION_TIMEOUT_MS / 1000} s` : `${err.code ?? ''} ${err.message}`.trim() };
  if (r.signal) return { why: `killed by ${r.signal}` };
  if (r.status !== 0) return { why: `VERSION exited ${r.status}` };
  let v: unknown;
  try {
    v = (JSON.parse(r.stdout) as { supportedVersions?: unknown }).supportedVersions;
  } catch {
    return { why: `its VERSION answer is not JSON: ${JSON.stringify(r.stdout.slice(0, 200))}` };
  }
  return Array.isArray(v) && v.every((x) => typeof x === 'string') ? { versions: v } : { why: 'its VERSION answer has no supportedVersions' };
}
