// A netlink socket (rtnetlink, or nftables' for a read): frames requests (struct nlmsghdr), reads acks and dumps, and turns a
// kernel NLMSG_ERROR into a NetlinkError with errno and the kernel's extended-ack text.
//
// Written by hand over koffi rather than with the `netlink` npm package: measured on this
// machine kind, that package attaches at 0.95/5.64 ms (p50/p99) against 0.49/2.48 ms here,
// has text-only errors, no request timeout, and breaks on concurrent dumps
// (shared/reference/measured-here.md).
import * as libc from '../sys/libc';
import { parseAttrs, readString } from './attr';

export const NETLINK_ROUTE = 0;
export const NETLINK_NETFILTER = 12;
export const NETLINK_CAP_ACK = 10;

export const NLM_F_REQUEST = 0x1;
export const NLM_F_MULTI = 0x2;
export const NLM_F_ACK = 0x4;
/** Asks the kernel to send the requester what it announces about the change (a new link's message). */
export const NLM_F_ECHO = 0x8;
export const NLM_F_DUMP = 0x300;
export const NLM_F_REPLACE = 0x100;
export const NLM_F_EXCL = 0x200;
export const NLM_F_CREATE = 0x400;
const NLM_F_ACK_TLVS = 0x200;

const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
const NLMSGERR_ATTR_MSG = 1;
const HDR = 16;

export class NetlinkError extends Error {
  constructor(readonly errno: number, readonly what: string, readonly kernelMessage: string) {
    super(`${what}: ${libc.errnoName(errno)}${kernelMessage ? ` (${kernelMessage})` : ''}`);
  }
  get code(): string {
    return libc.errnoName(this.errno);
  }
}

export interface NetlinkRequest {
  type: number;
  flags: number;
  body: Buffer;
  /** What the request does, for error messages ("add veth kni0a1b2"). */
  what: string;
}

export interface NetlinkMessage {
  type: number;
  flags: number;
  /** The message payload after struct nlmsghdr. */
  body: Buffer;
}

/**
 * One receive buffer for every socket of this thread: answers are read and parsed (and what is
 * kept copied out) before the call returns, and JavaScript runs one call at a time. A buffer per
 * socket was a 64 KiB zero-filled allocation for each attach's socket in the pod netns.
 */
const RECV = Buffer.allocUnsafe(64 * 1024);

/** struct sockaddr_nl: AF_NETLINK, port 0 (the kernel picks one), the multicast groups to join. */
export function sockaddrNl(groups = 0): Buffer {
  const a = Buffer.alloc(12);
  a.writeUInt16LE(libc.AF_NETLINK, 0);
  a.writeUInt32LE(groups, 8);
  return a;
}
const SOCKADDR_NL = sockaddrNl();

export class NetlinkSocket {
  readonly fd: number;
  private seq = Math.floor(Math.random() * 0x7fffffff);
  private readonly buf = RECV;
  private closed = false;

  /** Opens a socket in the calling thread's current network namespace (rtnetlink, unless another family is named). */
  constructor(protocol = NETLINK_ROUTE) {
    this.fd = libc.socket(libc.AF_NETLINK, libc.SOCK_RAW | libc.SOCK_CLOEXEC, protocol);
    try {
      libc.bind(this.fd, SOCKADDR_NL);
      libc.setsockoptInt(this.fd, libc.SOL_NETLINK, NETLINK_CAP_ACK, 1);
      libc.setsockoptInt(this.fd, libc.SOL_NETLINK, libc.NETLINK_EXT_ACK, 1);
    } catch (e) {
      libc.close(this.fd);
      throw e;
    }
  }

  close(): void {
    if (!this.closed) libc.close(this.fd);
    this.closed = true;
  }

  private frame(req: NetlinkRequest, seq: number, ack = true): Buffer {
    const m = Buffer.allocUnsafe(HDR + req.body.length); // from the pool: see attr.ts
    this.frameInto(m, 0, req, seq, ack);
    return m;
  }

  /** Writes req with its header at offset o of m; returns the offset after it. */
  private frameInto(m: Buffer, o: number, req: NetlinkRequest, seq: number, ack: boolean): number {
    m.writeUInt32LE(HDR + req.body.length, o);
    m.writeUInt16LE(req.type, o + 4);
    m.writeUInt16LE(NLM_F_REQUEST | (ack ? NLM_F_ACK : 0) | req.flags, o + 6);
    m.writeUInt32LE(seq, o + 8);
    m.writeUInt32LE(0, o + 12); // the port id: the kernel's to fill in
    return o + HDR + req.body.copy(m, o + HDR);
  }

  private nextSeq(): number {
    this.seq = (this.seq + 1) & 0x7fffffff;
    return this.seq;
  }

  /**
   * Sends the requests in one write and waits until the last is answered. The kernel runs them
   * in order, inside this send, but not atomically. Only the last asks for an ack: a failing
   * request is answered with its error whether it asked or not, before the last's answer, so
   * a batch that succeeds costs one read instead of one per request. On failure the first
   * error is thrown once the last answer is read.
   */
  exec(reqs: NetlinkRequest[]): void {
    if (reqs.length === 0) return;
    const first = this.nextSeq();
    for (let i = 1; i < reqs.length; i++) this.nextSeq();
    const last = reqs.length - 1;
    // Framed straight into one buffer: a write holds up to a dozen requests.
    let size = 0;
    for (const r of reqs) size += HDR + r.body.length;
    const m = Buffer.allocUnsafe(size);
    for (let i = 0, o = 0; i <= last; i++) o = this.frameInto(m, o, reqs[i], (first + i) & 0x7fffffff, i === last);
    libc.send(this.fd, m);
    let failure: NetlinkError | undefined;
    for (;;) {
      const n = libc.recv(this.fd, this.buf);
      for (const m of split(this.buf, n)) {
        if (m.type !== NLMSG_ERROR) continue;
        const idx = (m.seq - first) & 0x7fffffff;
        if (idx > last) continue;
        const err = ackError(m, reqs[idx].what);
        if (err && !failure) failure = err;
        if (idx !== last) continue;
        if (failure) throw failure;
        return;
      }
    }
  }

  /**
   * An nfnetlink batch: `begin`, the requests, `end`, in one write. The kernel answers each
   * request (they all ask for an ack) once the batch is committed or aborted, and never the two
   * markers, so exec() (which waits on the last message's ack) cannot carry it.
   */
  batch(begin: NetlinkRequest, reqs: NetlinkRequest[], end: NetlinkRequest): void {
    const all = [begin, ...reqs, end];
    const first = this.nextSeq();
    for (let i = 1; i < all.length; i++) this.nextSeq();
    let size = 0;
    for (const r of all) size += HDR + r.body.length;
    const m = Buffer.allocUnsafe(size);
    for (let i = 0, o = 0; i < all.length; i++) o = this.frameInto(m, o, all[i], (first + i) & 0x7fffffff, i > 0 && i < all.length - 1);
    libc.send(this.fd, m);
    let failure: NetlinkError | undefined;
    let pending = reqs.length;
    while (pending > 0) {
      const n = libc.recv(this.fd, this.buf);
      for (const msg of split(this.buf, n)) {
        if (msg.type !== NLMSG_ERROR) continue;
        const idx = (msg.seq - first) & 0x7fffffff;
        if (idx > all.length - 1) continue;
        const err = ackError(msg, all[idx].what);
        if (err && !failure) failure = err;
        // The begin marker's seq answers only a batch the kernel refused whole (or a failed commit).
        if (idx === 0 || idx === all.length - 1) {
          if (failure) throw failure;
          return;
        }
        pending--;
      }
    }
    if (failure) throw failure;
  }

  request(req: NetlinkRequest): void {
    this.exec([req]);
  }

  /** A request the kernel answers with messages and then the ack (a GET by name). */
  query(req: NetlinkRequest): NetlinkMessage[] {
    const seq = this.nextSeq();
    libc.send(this.fd, this.frame(req, seq));
    const out: NetlinkMessage[] = [];
    for (;;) {
      const n = libc.recv(this.fd, this.buf);
      for (const m of split(this.buf, n)) {
        if (m.seq !== seq) continue;
        if (m.type === NLMSG_ERROR) {
          const err = ackError(m, req.what);
          if (err) throw err;
          return out;
        }
        out.push({ type: m.type, flags: m.flags, body: Buffer.from(m.body) });
      }
    }
  }

  dump(type: number, body: Buffer, what: string): NetlinkMessage[] {
    const out: NetlinkMessage[] = [];
    this.dumpEach(type, body, what, (m) => out.push({ type: m.type, flags: m.flags, body: Buffer.from(m.body) }));
    return out;
  }

  /**
   * A dump read in place: each message goes to `each` as it is read, its body a view of the
   * receive buffer that the next read overwrites. For the dumps the node agent reads every few
   * seconds (a route, neighbour and FDB entry per peer): a copy of each message is garbage at
   * once, and its memory a churn of glibc's arenas (5,000 copies a dump of one family at 5,000 nodes).
   */
  dumpEach(type: number, body: Buffer, what: string, each: (m: NetlinkMessage) => void): void {
    const seq = this.nextSeq();
    const h = Buffer.alloc(HDR);
    h.writeUInt32LE(HDR + body.length, 0);
    h.writeUInt16LE(type, 4);
    h.writeUInt16LE(NLM_F_REQUEST | NLM_F_DUMP, 6);
    h.writeUInt32LE(seq, 8);
    libc.send(this.fd, Buffer.concat([h, body]));
    for (;;) {
      const n = libc.recv(this.fd, this.buf);
      for (const m of split(this.buf, n)) {
        if (m.seq !== seq) continue;
        if (m.type === NLMSG_DONE) return;
        if (m.type === NLMSG_ERROR) {
          const err = ackError(m, what);
          if (err) throw err;
          return;
        }
        each(m);
      }
    }
  }
}

export interface RawMessage {
  type: number;
  flags: number;
  seq: number;
  body: Buffer;
}

/** The messages (struct nlmsghdr and body) in the first n bytes of buf; the bodies are views of buf. */
export function split(buf: Buffer, n: number): RawMessage[] {
  const out: RawMessage[] = [];
  let o = 0;
  while (o + HDR <= n) {
    const len = buf.readUInt32LE(o);
    if (len < HDR || o + len > n) break;
    out.push({
      type: buf.readUInt16LE(o + 4),
      flags: buf.readUInt16LE(o + 6),
      seq: buf.readUInt32LE(o + 8),
      body: buf.subarray(o + HDR, o + len),
    });
    o += (len + 3) & ~3;
  }
  return out;
}

function ackError(m: RawMessage, what: string): NetlinkError | undefined {
  const errno = -m.body.readInt32LE(0);
  if (errno === 0) return undefined;
  let text = '';
  // With NETLINK_CAP_ACK the echoed request is only its header: TLVs start after it.
  if (m.flags & NLM_F_ACK_TLVS) {
    const tlvs = parseAttrs(m.body, 4 + HDR);
    const msg = tlvs.get(NLMSGERR_ATTR_MSG);
    if (msg) text = readString(msg);
  }
  return new NetlinkError(errno, what, text);
}
