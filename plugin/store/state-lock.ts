// One daemon per state dir: two daemons on one dir would hand out the same addresses and each
// reconcile would delete the other's veths. An exclusive flock on <state-dir>/lock, held for
// the life of the process (the kernel drops it on any exit, kill -9 included: no stale lock).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as libc from '../sys/libc';
import { makeDir } from '../sys/make-dir';

export class StateDirInUseError extends Error {}

export function lockStateDir(dir: string): void {
  makeDir(dir, 0o700);
  const file = path.join(dir, 'lock');
  const fd = fs.openSync(file, fs.constants.O_RDWR | fs.constants.O_CREAT, 0o600);
  try {
    libc.flock(fd, libc.LOCK_EX | libc.LOCK_NB);
  } catch (e) {
    let holder = '';
    try {
      holder = fs.readFileSync(file, 'utf8').trim();
    } catch {
      // unreadable: say nothing about the holder
    }
    fs.closeSync(fd);
    if (e instanceof libc.Errno && e.errno === os.constants.errno.EWOULDBLOCK) {
      throw new StateDirInUseError(`state dir ${dir} is in use by another kni-runtime${holder ? ` (pid ${holder})` : ''}: one daemon per state dir`);
    }
    throw e;
  }
  fs.ftruncateSync(fd, 0);
  fs.writeSync(fd, `${process.pid}\n`);
  // fd stays open on purpose: closing it would release the lock.
}
