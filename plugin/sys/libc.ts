// Thin libc bindings over koffi. Only the calls the kernel-facing code needs; each wrapper
// throws an Errno carrying the C errno so callers can map it to a precise error.
import koffi from 'koffi';
import os from 'node:os';

export class Errno extends Error {
  constructor(readonly call: string, readonly errno: number) {
    super(`${call}: ${errnoName(errno)} (${errno})`);
  }
  get code(): string {
    return errnoName(this.errno);
  }
}

/** Node's errno table, and the Linux errnos the kernel answers kni with that it lacks; an errno with two names (EAGAIN, EWOULDBLOCK) keeps the first. */
const ERRNO_NAMES = new Map<number, string>();
for (const [name, value] of [...Object.entries(os.constants.errno), ['EXFULL', 54] as const]) if (!ERRNO_NAMES.has(value)) ERRNO_NAMES.set(value, name);

export const errnoName = (errno: number): string => ERRNO_NAMES.get(errno) ?? `errno ${errno}`;

const libc = koffi.load('libc.so.6');

const c = {
  socket: libc.func('int socket(int domain, int type, int protocol)'),
  bind: libc.func('int bind(int fd, void *addr, uint32_t len)'),
  send: libc.func('intptr_t send(int fd, void *buf, uintptr_t len, int flags)'),
  recv: libc.func('intptr_t recv(int fd, void *buf, uintptr_t len, int flags)'),
  close: libc.func('int close(int fd)'),
  open: libc.func('int open(const char *path, int flags)'),
  write: libc.func('intptr_t write(int fd, void *buf, uintptr_t len)'),
  readlink: libc.func('intptr_t readlink(const char *path, void *buf, uintptr_t len)'),
  statx: libc.func('int statx(int dirfd, const char *path, int flags, unsigned int mask, void *buf)'),
  setsockopt: libc.func('int setsockopt(int fd, int level, int name, void *val, uint32_t len)'),
  setns: libc.func('int setns(int fd, int nstype)'),
  unshare: libc.func('int unshare(int flags)'),
  mount: libc.func('int mount(const char *src, const char *target, const char *fstype, unsigned long flags, void *data)'),
  umount2: libc.func('int umount2(const char *target, int flags)'),
  flock: libc.func('int flock(int fd, int op)'),
  mallocTrim: libc.func('int malloc_trim(uintptr_t pad)'),
  ioctl: libc.func('int ioctl(int fd, unsigned long req, void *arg)'),
  ioctlInt: libc.func('ioctl', 'int', ['int', 'unsigned long', 'unsigned long']),
  setsockoptFprog: libc.func('setsockopt', 'int', ['int', 'int', 'int', koffi.pointer(koffi.struct({ len: 'uint16', filter: 'void *' })), 'uint32']),
  ioctlIfreqData: libc.func('ioctl', 'int', ['int', 'unsigned long', koffi.pointer(koffi.struct({ name: koffi.array('uint8', 16), data: 'void *', pad: koffi.array('uint8', 16) }))]),
};

function check(call: string, rc: number | bigint): number {
  const n = Number(rc);
  if (n < 0) throw new Errno(call, koffi.errno());
  return n;
}

export const AF_NETLINK = 16;
export const SOCK_RAW = 3;
export const SOCK_CLOEXEC = 0o2000000;
export const O_RDONLY = 0;
export const O_CLOEXEC = 0o2000000;
export const O_PATH = 0o10000000;
const ERRNO_ENAMETOOLONG = 36;
export const CLONE_NEWNET = 0x40000000;
export const MS_BIND = 4096;
export const MS_REC = 16384;
export const MS_SHARED = 1 << 20;
export const MNT_DETACH = 2;
export const SOL_NETLINK = 270;
export const IPPROTO_TCP = 6;
export const TCP_MAXSEG = 2;
export const LOCK_EX = 2;
export const LOCK_NB = 4;
export const NETLINK_EXT_ACK = 11;
export const NETLINK_GET_STRICT_CHK = 12;

export function socket(domain: number, type: number, protocol: number): number {
  return check('socket', c.socket(domain, type, protocol));
}

export function bind(fd: number, addr: Buffer): void {
  check('bind', c.bind(fd, addr, addr.length));
}

export function send(fd: number, buf: Buffer): number {
  return check('send', c.send(fd, buf, buf.length, 0));
}

export function recv(fd: number, buf: Buffer): number {
  return check('recv', c.recv(fd, buf, buf.length, 0));
}

const MSG_DONTWAIT = 0x40;
const EAGAIN = 11;
/** recv(2) that does not wait: -1 when nothing is queued. */
export function recvNow(fd: number, buf: Buffer): number {
  const n = Number(c.recv(fd, buf, buf.length, MSG_DONTWAIT));
  if (n >= 0) return n;
  const errno = koffi.errno();
  if (errno === EAGAIN) return -1;
  throw new Errno('recv', errno);
}

/**
 * open(2) read-only, close-on-exec, outside Node's bookkeeping: a worker thread tracks the
 * descriptors its fs calls open and closes them when it exits, so one it hands to another
 * thread must come from here.
 */
export function openReadOnly(path: string): number {
  return check('open', c.open(path, O_RDONLY | O_CLOEXEC));
}

/** write(2): what was written, which a full disk can make less than the buffer. */
export function write(fd: number, buf: Buffer): number {
  return check('write', c.write(fd, buf, buf.length));
}

/** open(2) with O_PATH, close-on-exec: a handle that reads nothing and has no side effect on any file type. */
export function openPath(path: string): number {
  return check('open', c.open(path, O_PATH | O_CLOEXEC));
}

const LINK = Buffer.allocUnsafe(4096);
/** readlink(2); a target of PATH_MAX bytes or more is ENAMETOOLONG. */
export function readlink(path: string): string {
  const n = check('readlink', c.readlink(path, LINK, LINK.length));
  if (n === LINK.length) throw new Errno('readlink', ERRNO_ENAMETOOLONG);
  return LINK.toString('utf8', 0, n);
}

const AT_FDCWD = -100;
const AT_EMPTY_PATH = 0x1000;
const STATX_INO = 0x100;
const STATX = Buffer.alloc(256);
/**
 * A file's identity, from statx(2) (its struct has one layout on every architecture): the
 * device as major:minor, and the inode. Of an open fd, or of a path (symlinks followed).
 */
export function fileId(of: number | string): { dev: string; ino: number } {
  const byPath = typeof of === 'string';
  check('statx', c.statx(byPath ? AT_FDCWD : of, byPath ? of : '', byPath ? 0 : AT_EMPTY_PATH, STATX_INO, STATX));
  return { dev: `${STATX.readUInt32LE(136)}:${STATX.readUInt32LE(140)}`, ino: STATX.readUInt32LE(32) + STATX.readUInt32LE(36) * 2 ** 32 };
}

export function close(fd: number): void {
  c.close(fd);
}

const INT = Buffer.alloc(4);
export function setsockoptInt(fd: number, level: number, name: number, value: number): void {
  INT.writeInt32LE(value);
  check('setsockopt', c.setsockopt(fd, level, name, INT, 4));
}

export const SOL_SOCKET = 1;
const SO_ATTACH_FILTER = 26;
export const SO_RCVBUFFORCE = 33;
/** A classic BPF program (struct sock_filter[], 8 bytes each) as the socket's filter (struct sock_fprog: 16 bytes). */
export function attachSocketFilter(fd: number, program: Buffer): void {
  check('setsockopt', c.setsockoptFprog(fd, SOL_SOCKET, SO_ATTACH_FILTER, { len: program.length / 8, filter: program }, 16));
}

export function setns(fd: number, nstype: number): void {
  check('setns', c.setns(fd, nstype));
}

export function unshare(flags: number): void {
  check('unshare', c.unshare(flags));
}

export function mount(src: string | null, target: string, fstype: string | null, flags: number): void {
  check('mount', c.mount(src, target, fstype, flags, null));
}

export function flock(fd: number, op: number): void {
  check('flock', c.flock(fd, op));
}

/** glibc's malloc_trim(0): the free memory of every malloc arena given back to the kernel; whether any was. */
export function mallocTrim(): boolean {
  return c.mallocTrim(0) === 1;
}

export function umount2(target: string, flags: number): void {
  check('umount2', c.umount2(target, flags));
}

/** ioctl with a pointer argument. */
export function ioctl(fd: number, req: number, arg: Buffer): void {
  check('ioctl', c.ioctl(fd, req, arg));
}

/**
 * ioctl with a struct ifreq whose union holds a pointer (ifr_data, as SIOCETHTOOL takes): the
 * device's name and `data`, which the kernel reads and may write in place.
 */
export function ioctlIfreqData(fd: number, req: number, device: string, data: Buffer): void {
  const name = Buffer.alloc(16);
  name.write(device, 0, 15, 'utf8');
  check('ioctl', c.ioctlIfreqData(fd, req, { name: [...name], data, pad: new Array(16).fill(0) }));
}

/** ioctl with an integer argument passed by value (e.g. TUNSETPERSIST); returns what it returns. */
export function ioctlInt(fd: number, req: number, value: number): number {
  return check('ioctl', c.ioctlInt(fd, req, value));
}
