// kni leaving its node: `kni-runtime --uninstall`, or the DaemonSet's preStop finding that no
// kni pod follows (kube/leaving-node.ts). Besides the conflist and kni-cni, kni then takes its
// node network away (node/node-teardown.ts) and empties its state dir — but only when no pod is
// left on its network: a pod still running keeps its interfaces, and with them the bridge,
// routes, rules and records that a kni started again picks up.
//
// The preStop runs beside the daemon, which holds the node network and the state dir's lock:
// it leaves `<state dir>/leaving`, and the daemon does the rest when it stops. Run by hand with
// no daemon, --uninstall does it itself. A kni started again removes the marker: it is back.
import fs from 'node:fs';
import path from 'node:path';
import { Cidr } from '../ipam/ip';
import { readRangesFile } from '../kube/node-ranges';
import { NetlinkSocket } from '../netlink/socket';
import { kniPodLinks, removeNodeNetwork } from '../node/node-teardown';
import { StateDirInUseError, lockStateDir } from '../store/state-lock';
import type { NetnsRecord, SandboxRecord } from '../store/records';
import { StateStore } from '../store/state-store';
import type { Config } from './config';
import { log } from './log';

const MARKER = 'leaving';
/** Kept in the state dir when kni leaves: extensions registered with the node, not with a kni pod, are called again by a kni that comes back. */
const KEPT = new Set(['extensions']);

/** Marks a state dir kni ran with (none there, or not root as kni runs: nothing to mark). */
export function markLeaving(stateDir: string): void {
  if (!fs.existsSync(stateDir) || process.getuid?.() !== 0) return;
  fs.writeFileSync(path.join(stateDir, MARKER), `${new Date().toISOString()}\n`);
}

export function leavingMarked(stateDir: string): boolean {
  return fs.existsSync(path.join(stateDir, MARKER));
}

/** At start: kni is back on the node. Whether it had been told to leave. */
export function clearLeaving(stateDir: string): boolean {
  try {
    fs.unlinkSync(path.join(stateDir, MARKER));
    return true;
  } catch {
    return false;
  }
}

/**
 * The daemon's part, when it stops with the marker there: `held` is what its records hold
 * (sandboxes and the netns it made), `sockets` the ones it served.
 */
export async function leaveNode(cfg: Config, stateDir: string, ranges: Cidr[], held: number, sockets: string[]): Promise<void> {
  const sock = new NetlinkSocket();
  try {
    const links = kniPodLinks(sock);
    if (held || links.length) {
      log('warn', 'kni leaves this node with pods on its network: their interfaces stay, and kni\'s bridge, routes, rules and state dir with them (delete or drain the pods before kni leaves; a kni started again picks them up)', { records: held, hostLinks: links.slice(0, 20) });
      return;
    }
    const { removed, failed } = await removeNodeNetwork(sock, cfg, ranges);
    const emptied = emptyStateDir(stateDir);
    for (const s of sockets) fs.rmSync(s, { force: true });
    log('info', 'kni left this node: its node network and state are removed', { removed, stateDir: emptied });
    if (failed.length) log('warn', 'kni left this node but could not remove all of its node network', { failed });
  } finally {
    sock.close();
  }
}

/** --uninstall (and a leaving preStop), once markLeaving and the files' removal are done: with no daemon running, leaves the node itself. */
export async function leaveWithoutDaemon(cfg: Config, stateDir: string): Promise<void> {
  if (!fs.existsSync(stateDir)) return; // no kni ran here with this state dir
  if (process.getuid?.() !== 0) {
    log('warn', 'not root: kni\'s node network and state dir are left as they are', { stateDir });
    return;
  }
  try {
    lockStateDir(stateDir);
  } catch (e) {
    if (!(e instanceof StateDirInUseError)) throw e;
    log('info', 'kni-runtime is running: it removes its node network and state when it stops, if no pod is left on its network', { stateDir });
    return;
  }
  const store = new StateStore(stateDir);
  const sandboxes = store.sandboxes.loadAll();
  const netns = store.netns.loadAll();
  store.sandboxes.close();
  store.netns.close();
  const problems = [...sandboxes.problems, ...netns.problems];
  if (problems.length) {
    log('warn', 'kni\'s records are damaged: its node network and state dir stay', { problems });
    return;
  }
  let ranges = cfg.ranges;
  if (!ranges.length) {
    try {
      ranges = readRangesFile(stateDir) ?? [];
    } catch (e) {
      log('warn', 'the pod ranges are unknown: kni\'s masquerade and host port rules stay', { error: (e as Error).message });
    }
  }
  await leaveNode(cfg, stateDir, ranges, podsHeld(sandboxes.records, netns.records), []);
}

/**
 * The records of pods still on the node. One whose netns is gone is a pod gone with it (its
 * sandbox removed while no kni ran, or after kni's conflist was): it holds nothing there.
 */
export function podsHeld(sandboxes: Iterable<SandboxRecord>, netns: Iterable<NetnsRecord>): number {
  return [...sandboxes].filter((r) => netnsThere(r.netnsPath, r.netnsInode)).length + [...netns].filter((r) => netnsThere(r.path)).length;
}

function netnsThere(file: string, inode?: number): boolean {
  const st = fs.statSync(file, { throwIfNoEntry: false });
  return !!st && (!inode || st.ino === inode);
}

/** Everything in the state dir but the extensions' registrations; the dir itself where it can go (not a mount point). */
function emptyStateDir(stateDir: string): string {
  const kept: string[] = [];
  for (const e of fs.readdirSync(stateDir)) {
    const p = path.join(stateDir, e);
    if (KEPT.has(e) && fs.statSync(p).isDirectory() && fs.readdirSync(p).length) kept.push(e);
    else if (e !== 'lock') fs.rmSync(p, { recursive: true, force: true });
  }
  fs.rmSync(path.join(stateDir, 'lock'), { force: true });
  try {
    fs.rmdirSync(stateDir);
    return 'removed';
  } catch {
    return kept.length ? `emptied but for ${kept.join(', ')}` : 'emptied';
  }
}
