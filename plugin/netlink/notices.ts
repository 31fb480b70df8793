// The kernel's notices of links and routes going away, and of links going down (rtnetlink's
// multicast groups), read without waiting: what kni made, deleted or set down by someone else, is
// then repaired at once rather than at the next periodic check (plugin/node/kernel-notices.ts).
// A link going down needs its own notice: IPv4 drops the routes through it without telling
// anyone (no RTM_DELROUTE), and bringing it up again brings none of them back.
import os from 'node:os';
import * as libc from '../sys/libc';
import { formatIpBytes } from '../ipam/ip';
import { forEachAttr, readStringAt } from './attr';
import { NETLINK_ROUTE, sockaddrNl, split } from './socket';

const RTMGRP_LINK = 0x1;
const RTMGRP_IPV4_ROUTE = 0x40;
const RTMGRP_IPV6_ROUTE = 0x400;
const RTM_NEWLINK = 16;
const RTM_DELLINK = 17;
const RTM_DELROUTE = 25;
const IFINFOMSG = 16;
const IFLA_IFNAME = 3;
const RTA_DST = 1;
/** Offsets in the message (after its 16-byte header) of struct ifinfomsg's ifi_flags and ifi_change. */
const IFINFOMSG_FLAGS = 16 + 8;
const IFINFOMSG_CHANGE = 16 + 12;
/** struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags (u32). */
const RTMSG_FAMILY = 0;
const RTMSG_DST_LEN = 1;
const RTMSG_PROTOCOL = 5;
const RTMSG = 12;
const ENOBUFS = 105;
/** Datagrams one drain reads at most, so that a flood of deletions does not hold the event loop. */
const MAX_READS = 1024;

export interface Notices {
  /** Names of links deleted. */
  linksDeleted: string[];
  /** Names of links that went down (up before, not up now). */
  linksDown: string[];
  /** Routes deleted: family (AF_INET 2, AF_INET6 10), the protocol that made them and, for a route to one address (a /32 or /128), that address. */
  routesDeleted: { family: number; protocol: number; host?: string; destination?: string }[];
  /** The socket's buffer overflowed: notices were lost, anything may have changed. */
  lost: boolean;
  /** Messages read in all (with the filter on, only deletions and links going down). */
  messages: number;
}

/** What the socket is sent once its filter is on, and its buffer for a burst of them (a node's pods all going at once). */
const RCVBUF = 1 << 20;

/**
 * A classic BPF program letting only link and route deletions, and links going down, through:
 * every attach announces a dozen new links and routes, which would fill the socket between two
 * reads and cost the main thread their parsing. The kernel runs it as it hands each notice to the
 * socket. A link going down is an RTM_NEWLINK whose change mask has IFF_UP and whose flags do
 * not; a new link's notice (change mask all ones, not up yet) is not one.
 */
export function deletionsAndDowns(): Buffer {
  const le = os.endianness() === 'LE';
  // Loads are big-endian: nlmsg_type (at offset 4) compared in the host's order, and the byte of
  // ifi_flags (offset 24) and ifi_change (28) that holds IFF_UP found by the host's order.
  const typeAsLoaded = (t: number): number => (le ? ((t & 0xff) << 8) | (t >> 8) : t);
  const lowByte = (offset: number): number => (le ? offset : offset + 3);
  const BPF_LD_W_ABS = 0x20;
  const BPF_LD_H_ABS = 0x28;
  const BPF_LD_B_ABS = 0x30;
  const BPF_JEQ_K = 0x15;
  const BPF_JSET_K = 0x45;
  const BPF_RET_K = 0x06;
  const IFF_UP = 1;
  // [code, jump if true, jump if false, k]; jumps skip that many instructions. 10: drop, 11: pass.
  const program: [number, number, number, number][] = [
    [BPF_LD_H_ABS, 0, 0, 4],
    [BPF_JEQ_K, 9, 0, typeAsLoaded(RTM_DELLINK)],
    [BPF_JEQ_K, 8, 0, typeAsLoaded(RTM_DELROUTE)],
    [BPF_JEQ_K, 0, 6, typeAsLoaded(RTM_NEWLINK)],
    [BPF_LD_W_ABS, 0, 0, IFINFOMSG_CHANGE],
    [BPF_JEQ_K, 4, 0, 0xffffffff],
    [BPF_LD_B_ABS, 0, 0, lowByte(IFINFOMSG_CHANGE)],
    [BPF_JSET_K, 0, 2, IFF_UP],
    [BPF_LD_B_ABS, 0, 0, lowByte(IFINFOMSG_FLAGS)],
    [BPF_JSET_K, 0, 1, IFF_UP],
    [BPF_RET_K, 0, 0, 0],
    [BPF_RET_K, 0, 0, 0xffffffff],
  ];
  const b = Buffer.alloc(program.length * 8);
  program.forEach(([code, jt, jf, k], i) => {
    if (le) b.writeUInt16LE(code, i * 8);
    else b.writeUInt16BE(code, i * 8);
    b.writeUInt8(jt, i * 8 + 2);
    b.writeUInt8(jf, i * 8 + 3);
    if (le) b.writeUInt32LE(k, i * 8 + 4);
    else b.writeUInt32BE(k, i * 8 + 4);
  });
  return b;
}

export class NoticeSocket {
  readonly fd: number;
  private readonly buf = Buffer.allocUnsafe(64 * 1024);

  /** Subscribed in the calling thread's netns to link and route changes. */
  constructor() {
    this.fd = libc.socket(libc.AF_NETLINK, libc.SOCK_RAW | libc.SOCK_CLOEXEC, NETLINK_ROUTE);
    try {
      // Filtered before it is bound: no notice of another kind is ever queued.
      libc.attachSocketFilter(this.fd, deletionsAndDowns());
      try {
        libc.setsockoptInt(this.fd, libc.SOL_SOCKET, libc.SO_RCVBUFFORCE, RCVBUF);
      } catch {
        // Without CAP_NET_ADMIN: the default buffer, and a reconcile if it ever overflows.
      }
      libc.bind(this.fd, sockaddrNl(RTMGRP_LINK | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE));
    } catch (e) {
      libc.close(this.fd);
      throw e;
    }
  }

  /** The notices queued now (at most MAX_READS datagrams: a flood is read over several calls). */
  drain(): Notices {
    const out: Notices = { linksDeleted: [], linksDown: [], routesDeleted: [], lost: false, messages: 0 };
    for (let reads = 0; reads < MAX_READS; reads++) {
      let n: number;
      try {
        n = libc.recvNow(this.fd, this.buf);
      } catch (e) {
        if ((e as libc.Errno).errno !== ENOBUFS) throw e;
        out.lost = true;
        continue;
      }
      if (n < 0) return out;
      for (const m of split(this.buf, n)) {
        out.messages++;
        if ((m.type === RTM_DELLINK || m.type === RTM_NEWLINK) && m.body.length >= IFINFOMSG) {
          const names = m.type === RTM_DELLINK ? out.linksDeleted : out.linksDown;
          forEachAttr(m.body, IFINFOMSG, m.body.length, (t, start, end) => {
            if (t === IFLA_IFNAME) names.push(readStringAt(m.body, start, end));
          });
        } else if (m.type === RTM_DELROUTE && m.body.length >= RTMSG) {
          const route: Notices['routesDeleted'][number] = { family: m.body.readUInt8(RTMSG_FAMILY), protocol: m.body.readUInt8(RTMSG_PROTOCOL) };
          const dstLen = m.body.readUInt8(RTMSG_DST_LEN);
          forEachAttr(m.body, RTMSG, m.body.length, (t, start, end) => {
            if (t !== RTA_DST || (end - start !== 4 && end - start !== 16)) return;
            const ip = formatIpBytes(m.body, start, end - start);
            route.destination = `${ip}/${dstLen}`;
            if (dstLen === (end - start) * 8) route.host = ip;
          });
          out.routesDeleted.push(route);
        }
      }
    }
    return out;
  }

  close(): void {
    libc.close(this.fd);
  }
}
