// Routes (RTM_*ROUTE, struct rtmsg).
import { bitsOf, Cidr, Family, formatIp, parseIp } from '../ipam/ip';
import { forEachAttr, readIpAt } from './attr';
import { BodyWriter, bodyWriter } from './body-writer';
import { NetlinkError, NetlinkRequest, NetlinkSocket, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE } from './socket';

const RTM_NEWROUTE = 24;
const RTM_DELROUTE = 25;
const RTM_GETROUTE = 26;
const RTA_DST = 1;
const RTA_OIF = 4;
const RTA_GATEWAY = 5;
const RTA_PREFSRC = 7;
const RTA_TABLE = 15;
const RT_TABLE_MAIN = 254;
const RTPROT_BOOT = 3;
/**
 * The routes kni makes to other nodes' pods carry this protocol number (ip route shows
 * "proto 107"): at start every such route no peer wants any more is found and removed.
 */
export const RTPROT_KNI = 107;
/** A route learned from a router advertisement. */
export const RTPROT_RA = 9;
const RTNH_F_ONLINK = 4;
const RT_SCOPE_UNIVERSE = 0;
const RT_SCOPE_LINK = 253;
const RTN_UNICAST = 1;
const RTN_LOCAL = 2;

export interface Route {
  family: Family;
  /** "default" or a CIDR. */
  destination: string;
  gateway: string;
  index: number;
  protocol: number;
}

const afOf = (f: Family): number => (f === 4 ? 2 : 10);
/** sizeof(struct rtmsg): the attributes start after it. */
const RTMSG_LEN = 12;

/** A new body that starts with struct rtmsg. */
function rtmsg(family: Family, dstLen: number, protocol = RTPROT_BOOT, flags = 0, scope = RT_SCOPE_UNIVERSE): BodyWriter {
  const w = bodyWriter();
  const at = w.struct(RTMSG_LEN);
  w.u8At(at, afOf(family));
  w.u8At(at + 1, dstLen);
  w.u8At(at + 4, RT_TABLE_MAIN);
  w.u8At(at + 5, protocol);
  w.u8At(at + 6, scope);
  w.u8At(at + 7, RTN_UNICAST);
  w.u32At(at + 8, flags);
  return w;
}

export interface PeerRoute {
  destination: Cidr;
  gateway: string;
  index: number;
  /** The gateway is reached through this link even though no subnet of it covers it (vxlan). */
  onlink: boolean;
}

const routeWhat = (r: PeerRoute): string => `route ${r.destination.text} via ${r.gateway}${r.onlink ? ' onlink' : ''} (link ${r.index})`;

/**
 * A route to another node's pods, marked as kni's (RTPROT_KNI): replaces what is there, or with
 * `exclusive` fails (EEXIST) where any route to that destination is in place.
 */
export function peerRouteAdd(r: PeerRoute, exclusive = false): NetlinkRequest {
  const f = r.destination.family;
  const w = rtmsg(f, r.destination.prefixLength, RTPROT_KNI, r.onlink ? RTNH_F_ONLINK : 0);
  w.ip(RTA_DST, f, r.destination.base);
  w.ip(RTA_GATEWAY, f, parseIp(r.gateway).value);
  w.u32(RTA_OIF, r.index);
  return { type: RTM_NEWROUTE, flags: NLM_F_CREATE | (exclusive ? NLM_F_EXCL : NLM_F_REPLACE), what: `add ${routeWhat(r)}`, body: w.take() };
}

/** Deletes kni's route to a destination (whatever its gateway). */
export function peerRouteDel(destination: Cidr): NetlinkRequest {
  const w = rtmsg(destination.family, destination.prefixLength, RTPROT_KNI);
  w.ip(RTA_DST, destination.family, destination.base);
  return { type: RTM_DELROUTE, flags: 0, what: `delete route ${destination.text}`, body: w.take() };
}

/** The default route of one family via a gateway, out of the link with that index (gatewayText: the gateway as text, when the caller has it). */
export function defaultRouteAdd(family: Family, gateway: bigint, index: number, ifname: string, gatewayText?: string): NetlinkRequest {
  const w = rtmsg(family, 0);
  w.ip(RTA_GATEWAY, family, gateway);
  w.u32(RTA_OIF, index);
  return { type: RTM_NEWROUTE, flags: NLM_F_CREATE | NLM_F_REPLACE, what: `add default route via ${gatewayText ?? formatIp(family, gateway)} dev ${ifname}`, body: w.take() };
}

/**
 * A route to one address (/32 or /128) out of a link, scope link: how the node reaches a routed
 * pod through its host veth, and the routed pod its gateway. Protocol boot, not RTPROT_KNI: the
 * peer-route sync removes kni's routes that no peer wants, and this one goes away with its link.
 */
export function hostRouteAdd(family: Family, address: bigint, index: number, ifname: string, addressText?: string): NetlinkRequest {
  const len = bitsOf(family);
  const w = rtmsg(family, len, RTPROT_BOOT, 0, RT_SCOPE_LINK);
  w.ip(RTA_DST, family, address);
  w.u32(RTA_OIF, index);
  return { type: RTM_NEWROUTE, flags: NLM_F_CREATE | NLM_F_REPLACE, what: `add route ${addressText ?? formatIp(family, address)}/${len} dev ${ifname}`, body: w.take() };
}

/** Where routing sends a packet to an address (`ip route get`). */
export interface RouteLookup {
  /** The link out. */
  index: number;
  /** The next hop; '' when the address is on the link. */
  gateway: string;
  /** The source address the kernel picks; '' when none. */
  source: string;
  /** The address is this netns's own (an RTN_LOCAL answer). */
  local: boolean;
}

/**
 * The route this netns's routing takes to an address, undefined when it has none. One lookup
 * instead of a dump of every route.
 */
export function routeGet(sock: NetlinkSocket, family: Family, address: bigint, addressText?: string): RouteLookup | undefined {
  const w = rtmsg(family, bitsOf(family));
  w.ip(RTA_DST, family, address);
  const req: NetlinkRequest = { type: RTM_GETROUTE, flags: 0, what: `look up the route to ${addressText ?? formatIp(family, address)}`, body: w.take() };
  let msgs;
  try {
    msgs = sock.query(req);
  } catch (e) {
    if (e instanceof NetlinkError && (e.code === 'ENETUNREACH' || e.code === 'EHOSTUNREACH')) return undefined;
    throw e;
  }
  if (!msgs.length) return undefined;
  const b = msgs[0].body;
  const r: RouteLookup = { index: 0, gateway: '', source: '', local: b.readUInt8(7) === RTN_LOCAL };
  forEachAttr(b, RTMSG_LEN, b.length, (type, start, end) => {
    switch (type) {
      case RTA_OIF: r.index = b.readUInt32LE(start); break;
      case RTA_GATEWAY: r.gateway = readIpAt(b, start, end); break;
      case RTA_PREFSRC: r.source = readIpAt(b, start, end); break;
    }
  });
  return r;
}

/** The link the node's routing sends a packet to this address out of, 0 when it has no route. */
export function routeGetOif(sock: NetlinkSocket, family: Family, address: bigint, addressText?: string): number {
  return routeGet(sock, family, address, addressText)?.index ?? 0;
}

export function routeList(sock: NetlinkSocket, family: Family): Route[] {
  const out: Route[] = [];
  // Read in place (no map of views, no bigint): the node agent dumps a route per other node's
  // podCIDR at every check, 10,000 of them at 5,000 nodes.
  sock.dumpEach(RTM_GETROUTE, rtmsg(family, 0).take(), 'list routes', (m) => {
    const b = m.body;
    const dstLen = b.readUInt8(1);
    const r: Route = { family, destination: dstLen === 0 ? 'default' : '', gateway: '', index: 0, protocol: b.readUInt8(5) };
    let table = b.readUInt8(4);
    forEachAttr(b, RTMSG_LEN, b.length, (type, start, end) => {
      switch (type) {
        case RTA_TABLE: table = b.readUInt32LE(start); break;
        case RTA_DST: r.destination = readIpAt(b, start, end) && `${readIpAt(b, start, end)}/${dstLen}`; break;
        case RTA_GATEWAY: r.gateway = readIpAt(b, start, end); break;
        case RTA_OIF: r.index = b.readUInt32LE(start); break;
      }
    });
    if (table === RT_TABLE_MAIN) out.push(r);
  });
  return out;
}
