// Network namespaces: create and pin, unpin, and open netlink sockets inside one.
//
// Everything here runs synchronously on the calling thread (the main thread, or the thread
// that makes netns ahead: plugin/netns/netns-pool.ts): setns moves only that thread, the socket is bound to the
// netns it was created in, and the thread is moved back before any other JavaScript can run on
// it. Each thread keeps its own handle on the node netns ("home").
import fs from 'node:fs';
import path from 'node:path';
import * as libc from '../sys/libc';
import { NetlinkSocket } from '../netlink/socket';
import { makeDir } from '../sys/make-dir';

/** The daemon's own (node) netns, opened once at start. */
let homeFd = -1;

function home(): number {
  if (homeFd < 0) homeFd = fs.openSync('/proc/thread-self/ns/net', 'r');
  return homeFd;
}

function returnHome(): void {
  // If this fails the daemon would keep working in the wrong netns: never continue.
  try {
    libc.setns(home(), libc.CLONE_NEWNET);
  } catch (e) {
    process.stderr.write(`fatal: cannot return to the node network namespace: ${String(e)}\n`);
    process.abort();
  }
}

export class NotANetnsError extends Error {}

let homeInode = -1;
/** The nsfs inode of the daemon's own (node) netns: pods must never be wired there. */
export function homeNetnsInode(): number {
  if (homeInode < 0) homeInode = fs.fstatSync(home()).ino;
  return homeInode;
}

/** Runs fn with the calling thread inside the netns open on fd (fn must not yield). */
export function inNetns<T>(fd: number, fn: () => T): T {
  home();
  try {
    libc.setns(fd, libc.CLONE_NEWNET);
  } catch (e) {
    if (e instanceof libc.Errno && e.code === 'EINVAL') throw new NotANetnsError('not a network namespace');
    throw e;
  }
  try {
    return fn();
  } finally {
    returnHome();
  }
}

/** A netlink socket living in the netns open on fd. */
export const socketInNetns = (fd: number): NetlinkSocket => inNetns(fd, () => new NetlinkSocket());

/**
 * Makes dir a shared mount point (as iproute2 does for /run/netns) so that netns pins
 * made here appear in every mount namespace, the runtime's included.
 */
export function ensureNetnsDir(dir: string): void {
  makeDir(dir, 0o755);
  try {
    libc.mount('', dir, 'none', libc.MS_SHARED | libc.MS_REC);
  } catch (e) {
    if (!(e instanceof libc.Errno && e.code === 'EINVAL')) throw e;
    libc.mount(dir, dir, 'none', libc.MS_BIND | libc.MS_REC);
    libc.mount('', dir, 'none', libc.MS_SHARED | libc.MS_REC);
  }
}

/**
 * Makes a new netns and returns a descriptor of it, any thread's to use and close; the calling
 * thread stays in its own.
 */
export function newNetns(): number {
  home();
  try {
    libc.unshare(libc.CLONE_NEWNET);
    return libc.openReadOnly('/proc/thread-self/ns/net');
  } finally {
    returnHome();
  }
}

/** Pins the netns open on fd at dir/name by a bind mount (the caller still closes fd). */
function pinNetns(fd: number, dir: string, name: string): string {
  const target = path.join(dir, name);
  fs.closeSync(fs.openSync(target, fs.constants.O_RDONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o444));
  try {
    libc.mount(`/proc/self/fd/${fd}`, target, 'none', libc.MS_BIND);
  } catch (e) {
    fs.rmSync(target, { force: true });
    throw e;
  }
  return target;
}

/** Pins at dir/name the netns open on fd (a new one when none is given), and closes fd. */
export function createPinnedNetns(dir: string, name: string, fd = newNetns()): string {
  try {
    return pinNetns(fd, dir, name);
  } finally {
    fs.closeSync(fd);
  }
}

/** Unpins a netns; the kernel frees it (and its veths) once nothing else holds it. */
export function removePinnedNetns(target: string): void {
  try {
    libc.umount2(target, libc.MNT_DETACH);
  } catch (e) {
    if (!(e instanceof libc.Errno && (e.code === 'EINVAL' || e.code === 'ENOENT'))) throw e;
  }
  fs.rmSync(target, { force: true });
}
