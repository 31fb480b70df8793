// Opening a netns path someone handed us, once, safely. The path is opened with O_PATH (which
// never blocks, not even on a FIFO, and has no side effect on any file type); every check is
// then made on what was opened, not on the path, so swapping a symlink or a bind mount after
// the check changes nothing; and the fd is reopened through /proc/self/fd (no path lookup) to
// get one setns accepts. Callers use that fd for all their kernel work and remember the
// netns's inode to tell later whether the same path still names the same netns.
// The calls are libc's through koffi, as the netlink sends are, rather than Node's fs: between
// requests, as on a pod's attach, the daemon's netns open took 57 µs through Node's fs bindings
// and 45 through these (docs/performance-history.md).
import fs from 'node:fs';
import * as libc from '../sys/libc';
import { KniError, invalid } from '../core/errors';
import type { NetlinkSocket } from '../netlink/socket';
import { homeNetnsInode, socketInNetns } from './netns';

const NS_GET_NSTYPE = 0xb703;
const PROC_NETNS = /^\/proc\/[1-9][0-9]*\/(task\/[1-9][0-9]*\/)?ns\/net$/;

export interface NetnsHandle {
  readonly fd: number;
  readonly path: string;
  /** The netns's identity (nsfs inode); the node's never appears here. */
  readonly inode: number;
  close(): void;
}

/** Where the path may lead: inside one of these roots, or any netns for /proc/<pid>/ns/net. */
export interface NetnsPolicy {
  /** 'any': a path kni recorded or made itself, checked for what it names but not where. */
  allowedRoots: string[] | 'any';
  field?: string;
}

/**
 * The allowed roots with symlinks resolved (/var/run → /run). Roots are configuration: each is
 * resolved once, not on every attach; one that does not exist yet (containerd makes its netns
 * dir with its first pod) is tried again when a path lies in none of the resolved ones.
 */
const resolvedRoots = new Map<string, string>();
const realRoots = (roots: string[], retryMissing: boolean): string[] =>
  roots.flatMap((r) => {
    let real = resolvedRoots.get(r);
    if (real === undefined) {
      if (!retryMissing) return [];
      try {
        real = fs.realpathSync(r);
      } catch {
        return [];
      }
      resolvedRoots.set(r, real);
    }
    return [real];
  });

/** Whether an opened path lies in a root: the resolved ones first, missing ones tried only then. */
const insideRoots = (opened: string, roots: string[]): boolean =>
  realRoots(roots, false).some((r) => opened.startsWith(`${r}/`)) || realRoots(roots, true).some((r) => opened.startsWith(`${r}/`));

/**
 * Opens a netns path: INVALID_ARGUMENT when it leads outside the policy's roots, is not a network
 * namespace (a FIFO, a plain file, another kind of namespace) or is the node's own netns;
 * NOT_FOUND when nothing is there.
 */
export function openNetns(p: string, policy: NetnsPolicy): NetnsHandle {
  const field = policy.field ?? 'netns path';
  if (p.includes('\0')) throw invalid(`${field} is not a valid path`);
  const isProc = PROC_NETNS.test(p);
  let pathFd: number;
  try {
    pathFd = libc.openPath(p);
  } catch (e) {
    const code = (e as libc.Errno).code;
    if (code === 'ENOENT' || code === 'ESRCH') throw new KniError('NOT_FOUND', `${field} ${p} does not exist${isProc ? ' (no such process)' : ''}`);
    throw invalid(`${field} ${p} cannot be opened: ${code}`);
  }
  let fd = -1;
  try {
    // What was opened, as the kernel names it: a mount point path, or "net:[inode]" under /proc.
    const opened = libc.readlink(`/proc/self/fd/${pathFd}`);
    const roots = policy.allowedRoots;
    if (!isProc && roots !== 'any' && !insideRoots(opened, roots)) {
      throw invalid(`${field} ${p} is outside the allowed netns roots (${roots.join(', ')})`);
    }
    const id = libc.fileId(pathFd);
    if (id.dev !== nsfsDevice()) throw invalid(`${field} ${p} is not a network namespace`);
    fd = libc.openReadOnly(`/proc/self/fd/${pathFd}`);
    if (libc.ioctlInt(fd, NS_GET_NSTYPE, 0) !== libc.CLONE_NEWNET) throw invalid(`${field} ${p} is not a network namespace`);
    if (id.ino === homeNetnsInode()) throw invalid(`${field} ${p} is the node's own network namespace, not a pod's`);
    const owned = fd;
    fd = -1; // the handle owns it now
    let open = true;
    // Closing twice would close whatever the number was reused for (libuv's own fds included).
    const close = () => {
      if (!open) return;
      open = false;
      libc.close(owned);
    };
    return { fd: owned, path: p, inode: id.ino, close };
  } finally {
    libc.close(pathFd);
    if (fd >= 0) libc.close(fd);
  }
}

let nsfsDev = '';
/** Every namespace file lives on the one nsfs superblock: its device tells them apart from files. */
function nsfsDevice(): string {
  if (!nsfsDev) nsfsDev = libc.fileId('/proc/self/ns/net').dev;
  return nsfsDev;
}

/** What a recorded netns path names now. */
export type RecordedNetns =
  | { state: 'same'; handle: NetnsHandle }
  | { state: 'gone'; reason: string }
  | { state: 'other'; reason: string };

/**
 * Reopens a path recorded at attach. 'other' when it now names another netns than the one
 * recorded (a pin replaced, a pid reused after a restart, the node's own netns): the caller
 * must not touch what is there. A record without an inode (written before kni kept one)
 * takes the first pod netns it finds.
 */
export function reopenRecordedNetns(p: string, inode: number | undefined): RecordedNetns {
  let h: NetnsHandle;
  try {
    h = openNetns(p, { allowedRoots: 'any' });
  } catch (e) {
    if (e instanceof KniError && e.code === 'NOT_FOUND') return { state: 'gone', reason: `netns ${p} is gone` };
    return { state: 'other', reason: `netns path ${p} no longer names the sandbox's netns: ${(e as Error).message}` };
  }
  if (inode !== undefined && h.inode !== inode) {
    h.close();
    return { state: 'other', reason: `netns path ${p} now names another network namespace (inode ${h.inode}, recorded ${inode})` };
  }
  return { state: 'same', handle: h };
}

/** True when p is a netns pin (kni's own netns dir: no roots policy). */
export function isNetnsPin(p: string): boolean {
  try {
    openNetns(p, { allowedRoots: 'any' }).close();
    return true;
  } catch {
    return false;
  }
}

/**
 * Runs fn with a netlink socket in the netns a sandbox was wired in; undefined (fn not run)
 * when that path is gone or names another netns now.
 */
export function inRecordedNetns<T>(p: string, inode: number | undefined, fn: (sock: NetlinkSocket) => T): T | undefined {
  const ns = reopenRecordedNetns(p, inode);
  if (ns.state !== 'same') return undefined;
  try {
    const sock = socketInNetns(ns.handle.fd);
    try {
      return fn(sock);
    } finally {
      sock.close();
    }
  } finally {
    ns.handle.close();
  }
}
