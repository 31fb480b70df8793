// Routes (RTM_*ROUTE, struct rtmsg).
import { Family, formatIp, ipBytes } from '../ipam/ip';
import { attr, attrU32, parseAttrs } from './attr';
import { NetlinkRequest, NetlinkSocket, NLM_F_CREATE, NLM_F_REPLACE } from './socket';

const RTM_NEWROUTE = 24;
const RTM_GETROUTE = 26;
const RTA_DST = 1;
const RTA_OIF = 4;
const RTA_GATEWAY = 5;
const RTA_TABLE = 15;
const RT_TABLE_MAIN = 254;
const RTPROT_BOOT = 3;
const RT_SCOPE_UNIVERSE = 0;
const RTN_UNICAST = 1;

export interface Route {
  family: Family;
  /** "default" or a CIDR. */
  destination: string;
  gateway: string;
  index: number;
}

const afOf = (f: Family): number => (f === 4 ? 2 : 10);

function rtmsg(family: Family, dstLen: number): Buffer {
  const b = Buffer.alloc(12);
  b.writeUInt8(afOf(family), 0);
  b.writeUInt8(dstLen, 1);
  b.writeUInt8(RT_TABLE_MAIN, 4);
  b.writeUInt8(RTPROT_BOOT, 5);
  b.writeUInt8(RT_SCOPE_UNIVERSE, 6);
  b.writeUInt8(RTN_UNICAST, 7);
  return b;
}

/** The default route of one family via a gateway, out of the link with that index. */
export function defaultRouteAdd(family: Family, gateway: bigint, index: number, ifname: string): NetlinkRequest {
  return {
    type: RTM_NEWROUTE,
    flags: NLM_F_CREATE | NLM_F_REPLACE,
    what: `add default route via ${formatIp(family, gateway)} dev ${ifname}`,
    body: Buffer.concat([rtmsg(family, 0), attr(RTA_GATEWAY, ipBytes(family, gateway)), attrU32(RTA_OIF, index)]),
  };
}

export function routeList(sock: NetlinkSocket, family: Family): Route[] {
  const out: Route[] = [];
  for (const m of sock.dump(RTM_GETROUTE, rtmsg(family, 0), 'list routes')) {
    const a = parseAttrs(m.body, 12);
    const table = a.get(RTA_TABLE)?.readUInt32LE(0) ?? m.body.readUInt8(4);
    if (table !== RT_TABLE_MAIN) continue;
    const toIp = (b: Buffer | undefined): string =>
      b ? formatIp(family, [...b].reduce((acc, x) => (acc << 8n) | BigInt(x), 0n)) : '';
    const dstLen = m.body.readUInt8(1);
    const dst = a.get(RTA_DST);
    out.push({
      family,
      destination: dst ? `${toIp(dst)}/${dstLen}` : dstLen === 0 ? 'default' : '',
      gateway: toIp(a.get(RTA_GATEWAY)),
      index: a.get(RTA_OIF)?.readUInt32LE(0) ?? 0,
    });
  }
  return out;
}
