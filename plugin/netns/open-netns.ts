// Opening a netns path someone handed us, once, safely. The path is opened with O_PATH (which
// never blocks, not even on a FIFO, and has no side effect on any file type); every check is
// then made on what was opened, not on the path, so swapping a symlink or a bind mount after
// the check changes nothing; and the fd is reopened through /proc/self/fd (no path lookup) to
// get one setns accepts (libuv opens every file close-on-exec). Callers use that fd for all their kernel work and remember the
// netns's inode to tell later whether the same path still names the same netns.
import fs from 'node:fs';
import * as libc from '../sys/libc';
import { KniError, invalid } from '../core/errors';
import { homeNetnsInode } from './netns';

const O_PATH = 0o10000000;
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
  const isProc = PROC_NETNS.test(p);
  let pathFd: number;
  try {
    pathFd = fs.openSync(p, O_PATH);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ESRCH') throw new KniError('NOT_FOUND', `${field} ${p} does not exist${isProc ? ' (no such process)' : ''}`);
    throw invalid(`${field} ${p} cannot be opened: ${code ?? (e as Error).message}`);
  }
  let fd = -1;
  try {
    // What was opened, as the kernel names it: a mount point path, or "net:[inode]" under /proc.
    const opened = fs.readlinkSync(`/proc/self/fd/${pathFd}`);
    const roots = policy.allowedRoots;
    if (!isProc && roots !== 'any' && !insideRoots(opened, roots)) {
      throw invalid(`${field} ${p} is outside the allowed netns roots (${roots.join(', ')})`);
    }
    const st = fs.fstatSync(pathFd);
    if (st.dev !== nsfsDevice()) throw invalid(`${field} ${p} is not a network namespace`);
    fd = fs.openSync(`/proc/self/fd/${pathFd}`, fs.constants.O_RDONLY);
    if (libc.ioctlInt(fd, NS_GET_NSTYPE, 0) !== libc.CLONE_NEWNET) throw invalid(`${field} ${p} is not a network namespace`);
    if (st.ino === homeNetnsInode()) throw invalid(`${field} ${p} is the node's own network namespace, not a pod's`);
    const owned = fd;
    fd = -1; // the handle owns it now
    let open = true;
    // Closing twice would close whatever the number was reused for (libuv's own fds included).
    const close = () => {
      if (!open) return;
      open = false;
      fs.closeSync(owned);
    };
    return { fd: owned, path: p, inode: st.ino, close };
  } finally {
    fs.closeSync(pathFd);
    if (fd >= 0) fs.closeSync(fd);
  }
}

let nsfsDev = -1;
/** Every namespace file lives on the one nsfs superblock: its device tells them apart from files. */
function nsfsDevice(): number {
  if (nsfsDev < 0) nsfsDev = fs.statSync('/proc/self/ns/net').dev;
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
