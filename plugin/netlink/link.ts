// Links (RTM_*LINK, struct ifinfomsg): request builders and lookups.
import { attr, attrNested, attrString, attrU32, attrU8, forEachAttr, readStringAt } from './attr';
import { NetlinkError, NetlinkRequest, NetlinkSocket, NLM_F_CREATE, NLM_F_ECHO, NLM_F_EXCL } from './socket';

const RTM_NEWLINK = 16;
const RTM_DELLINK = 17;
const RTM_GETLINK = 18;
const RTM_SETLINK = 19;

const AF_UNSPEC = 0;
const AF_BRIDGE = 7;
export const IFF_UP = 0x1;

const IFLA_ADDRESS = 1;
const IFLA_IFNAME = 3;
const IFLA_MTU = 4;
const IFLA_MASTER = 10;
const IFLA_PROTINFO = 12;
const IFLA_LINKINFO = 18;
const IFLA_NET_NS_FD = 28;
const IFLA_LINK = 5;
const IFLA_IFALIAS = 20;
const IFLA_LINK_NETNSID = 37;
const IFLA_EXT_MASK = 29;
const IFLA_NUM_TX_QUEUES = 31;
const IFLA_NUM_RX_QUEUES = 32;
const RTEXT_FILTER_SKIP_STATS = 1 << 3;
const IFLA_GROUP = 27;
const IFLA_AF_SPEC = 26;
const AF_INET6 = 10;
const IFLA_INET6_ADDR_GEN_MODE = 8;
const IN6_ADDR_GEN_MODE_NONE = 1;
const IFLA_INFO_KIND = 1;
const IFLA_INFO_DATA = 2;
const VETH_INFO_PEER = 1;
const IFLA_BRPORT_MODE = 4; // hairpin

export interface Link {
  index: number;
  name: string;
  flags: number;
  mtu: number;
  mac: string;
  master: number;
  kind: string;
  /** The interface alias (ip link set … alias): kni writes "kni:<sandbox id>" on host veths. */
  alias: string;
  /** For a veth: the peer's ifindex, and the nsid of the peer's netns (-1 if the same netns). */
  peerIndex: number;
  peerNetnsId: number;
}

function ifinfomsg(index = 0, flags = 0, change = 0, family = AF_UNSPEC): Buffer {
  const b = Buffer.allocUnsafe(16).fill(0); // from the pool: see attr.ts
  b.writeUInt8(family, 0);
  b.writeInt32LE(index, 4);
  b.writeUInt32LE(flags, 8);
  b.writeUInt32LE(change, 12);
  return b;
}

export function macBytes(mac: string): Buffer {
  const parts = mac.split(':');
  const b = Buffer.allocUnsafe(parts.length);
  for (let i = 0; i < parts.length; i++) b[i] = parseInt(parts[i], 16);
  return b;
}
function macString(b: Buffer): string {
  let s = '';
  for (let i = 0; i < b.length; i++) s += `${i ? ':' : ''}${b[i] < 16 ? '0' : ''}${b[i].toString(16)}`;
  return s;
}

const IFLA_BR_MCAST_SNOOPING = 23;

const bridgeInfo = (mcastSnooping: boolean): Buffer =>
  attrNested(IFLA_LINKINFO, [attrString(IFLA_INFO_KIND, 'bridge'), attrNested(IFLA_INFO_DATA, [attrU8(IFLA_BR_MCAST_SNOOPING, mcastSnooping ? 1 : 0)])]);

/** `mcastSnooping`: see bridgeSetMulticastSnooping. */
export function bridgeAdd(name: string, mtu: number, mac: string, mcastSnooping: boolean): NetlinkRequest {
  return {
    type: RTM_NEWLINK,
    flags: NLM_F_CREATE | NLM_F_EXCL,
    what: `add bridge ${name}`,
    body: Buffer.concat([
      ifinfomsg(0, IFF_UP, IFF_UP),
      attrString(IFLA_IFNAME, name),
      attrU32(IFLA_MTU, mtu),
      attr(IFLA_ADDRESS, macBytes(mac)),
      bridgeInfo(mcastSnooping),
    ]),
  };
}

/**
 * Multicast snooping on a bridge. On, the kernel re-arms every forwarding port's multicast
 * timers whenever any port joins or leaves (br_port_state_selection), so each attach and detach
 * costs time in proportion to the pods already there; off, multicast is flooded to every port,
 * as IPv4 ARP always is.
 */
export function bridgeSetMulticastSnooping(name: string, on: boolean): NetlinkRequest {
  return {
    type: RTM_NEWLINK,
    flags: 0,
    what: `turn multicast snooping ${on ? 'on' : 'off'} on ${name}`,
    body: Buffer.concat([ifinfomsg(), attrString(IFLA_IFNAME, name), bridgeInfo(on)]),
  };
}

/** An ifb device (it re-queues what is redirected to it: a pod's egress is shaped there). */
export function ifbAdd(name: string, alias: string): NetlinkRequest[] {
  return [
    {
      type: RTM_NEWLINK,
      flags: NLM_F_CREATE | NLM_F_EXCL,
      what: `add ifb ${name}`,
      body: Buffer.concat([ifinfomsg(0, IFF_UP, IFF_UP), attrString(IFLA_IFNAME, name), attrNested(IFLA_LINKINFO, [attrString(IFLA_INFO_KIND, 'ifb')])]),
    },
    { type: RTM_NEWLINK, flags: 0, what: `set alias of ${name}`, body: Buffer.concat([ifinfomsg(), attrString(IFLA_IFNAME, name), attrString(IFLA_IFALIAS, alias)]) },
  ];
}

export interface VxlanSpec {
  name: string;
  vni: number;
  /** The node's own underlay address (IPv4 or IPv6) and the link that carries it. */
  local: { family: 4 | 6; bytes: Buffer };
  underlayIndex: number;
  port: number;
  mtu: number;
  mac: string;
}

const IFLA_VXLAN_ID = 1;
const IFLA_VXLAN_LINK = 3;
const IFLA_VXLAN_LOCAL = 4;
const IFLA_VXLAN_LEARNING = 7;
const IFLA_VXLAN_PORT = 15;
const IFLA_VXLAN_LOCAL6 = 17;

/**
 * A vxlan device with learning off: every remote endpoint comes from FDB entries kni writes,
 * nothing is flooded. Replaces the settings of an existing device of that name.
 */
export function vxlanAdd(v: VxlanSpec): NetlinkRequest {
  const port = Buffer.alloc(2);
  port.writeUInt16BE(v.port); // the only big-endian vxlan attribute
  return {
    type: RTM_NEWLINK,
    flags: NLM_F_CREATE | NLM_F_EXCL,
    what: `add vxlan ${v.name} (vni ${v.vni})`,
    body: Buffer.concat([
      ifinfomsg(0, IFF_UP, IFF_UP),
      attrString(IFLA_IFNAME, v.name),
      attrU32(IFLA_MTU, v.mtu),
      attr(IFLA_ADDRESS, macBytes(v.mac)),
      attrNested(IFLA_LINKINFO, [
        attrString(IFLA_INFO_KIND, 'vxlan'),
        attrNested(IFLA_INFO_DATA, [
          attrU32(IFLA_VXLAN_ID, v.vni),
          attrU32(IFLA_VXLAN_LINK, v.underlayIndex),
          attr(v.local.family === 4 ? IFLA_VXLAN_LOCAL : IFLA_VXLAN_LOCAL6, v.local.bytes),
          attrU8(IFLA_VXLAN_LEARNING, 0),
          attr(IFLA_VXLAN_PORT, port),
        ]),
      ]),
    ]),
  };
}

export interface VethSpec {
  name: string;
  /** The host end's MAC (else the kernel picks one). */
  mac?: string;
  mtu: number;
  /** The bridge the host end joins; 0: none (a routed host end). */
  master: number;
  peer: { name: string; mac: string; netnsFd: number };
}

/**
 * One queue each way for each end. Asked for none, the kernel gives a veth end a queue per
 * CPU and then cuts it back to one in use, and cutting transmit queues of a registered device
 * waits for an expedited RCU grace period (veth_init_queues → netif_set_real_num_tx_queues →
 * synchronize_net): two per pod, each an interrupt to every CPU of the node and 50–150 µs of
 * the attach here. A pod's veth uses one queue either way.
 */
const oneQueue = (): Buffer[] => [attrU32(IFLA_NUM_TX_QUEUES, 1), attrU32(IFLA_NUM_RX_QUEUES, 1)];

/**
 * A veth pair created in one request: the host end enslaved (brought up by the caller once
 * its settings are in), the peer created directly in the pod netns, one queue each way on
 * both. The peer cannot be brought up here (the kernel answers ENOTCONN): that is done from a
 * socket inside the pod netns.
 */
export function vethAdd(v: VethSpec): NetlinkRequest {
  const peer = Buffer.concat([
    ifinfomsg(),
    attrString(IFLA_IFNAME, v.peer.name),
    attrU32(IFLA_MTU, v.mtu),
    attr(IFLA_ADDRESS, macBytes(v.peer.mac)),
    attrU32(IFLA_NET_NS_FD, v.peer.netnsFd),
    ...oneQueue(),
  ]);
  return {
    type: RTM_NEWLINK,
    flags: NLM_F_CREATE | NLM_F_EXCL,
    what: `add veth ${v.name}/${v.peer.name}`,
    body: Buffer.concat([
      ifinfomsg(),
      attrString(IFLA_IFNAME, v.name),
      ...(v.mac ? [attr(IFLA_ADDRESS, macBytes(v.mac))] : []),
      attrU32(IFLA_MTU, v.mtu),
      ...(v.master ? [attrU32(IFLA_MASTER, v.master)] : []),
      ...oneQueue(),
      attrNested(IFLA_LINKINFO, [
        attrString(IFLA_INFO_KIND, 'veth'),
        attrNested(IFLA_INFO_DATA, [attr(VETH_INFO_PEER, peer)]),
      ]),
    ]),
  };
}

export function linkSetUp(name: string): NetlinkRequest {
  return {
    type: RTM_NEWLINK,
    flags: 0,
    what: `set ${name} up`,
    body: Buffer.concat([ifinfomsg(0, IFF_UP, IFF_UP), attrString(IFLA_IFNAME, name)]),
  };
}

export function linkSetHairpin(index: number, name: string): NetlinkRequest {
  return {
    type: RTM_SETLINK,
    flags: 0,
    what: `set hairpin on ${name}`,
    body: Buffer.concat([ifinfomsg(index, 0, 0, AF_BRIDGE), attrNested(IFLA_PROTINFO, [attrU8(IFLA_BRPORT_MODE, 1)])]),
  };
}

/**
 * No IPv6 link-local address on this link: it then sends no DAD, router solicitation or MLD
 * multicast, which a bridge would flood to every pod port (measured: with 1000 pods each new
 * pod cost the node ~5000 frame copies and the next attach 3× longer). Set before the link is up.
 */
export function linkSetNoLinkLocal(index: number, name: string): NetlinkRequest {
  return {
    type: RTM_NEWLINK,
    flags: 0,
    what: `turn off IPv6 link-local on ${name}`,
    body: Buffer.concat([ifinfomsg(index), attrNested(IFLA_AF_SPEC, [attrNested(AF_INET6, [attrU8(IFLA_INET6_ADDR_GEN_MODE, IN6_ADDR_GEN_MODE_NONE)])])]),
  };
}

export function linkSetUpByIndex(index: number, name: string): NetlinkRequest {
  return { type: RTM_NEWLINK, flags: 0, what: `set ${name} up`, body: ifinfomsg(index, IFF_UP, IFF_UP) };
}

export function linkSetAlias(index: number, name: string, alias: string): NetlinkRequest {
  return { type: RTM_NEWLINK, flags: 0, what: `set alias of ${name}`, body: Buffer.concat([ifinfomsg(index), attrString(IFLA_IFALIAS, alias)]) };
}

/** Moves a link (found by name) to a device group, with a new alias, in one request. */
export function linkSetGroup(name: string, group: number, alias: string): NetlinkRequest {
  return { type: RTM_NEWLINK, flags: 0, what: `move ${name} to group ${group}`, body: Buffer.concat([ifinfomsg(), attrString(IFLA_IFNAME, name), attrU32(IFLA_GROUP, group), attrString(IFLA_IFALIAS, alias)]) };
}

/** Deletes every link of a device group in one request: the kernel unregisters them together. */
export function linkGroupDel(group: number, what: string): NetlinkRequest {
  return { type: RTM_DELLINK, flags: 0, what: `delete ${what} (group ${group})`, body: Buffer.concat([ifinfomsg(), attrU32(IFLA_GROUP, group)]) };
}

/**
 * Deletes a link by name, or by index when one is given (the kernel then ignores the name):
 * ifindexes are not reused, so a link made since under the same name is never hit.
 */
export function linkDel(name: string, index = 0): NetlinkRequest {
  return { type: RTM_DELLINK, flags: 0, what: `delete link ${name}`, body: Buffer.concat([ifinfomsg(index), attrString(IFLA_IFNAME, name)]) };
}

/**
 * A link from an RTM_NEWLINK message. Reads the attributes in place and keeps only the ones a
 * Link has: a veth's message is ≈ 1.5 KiB of ≈ 50 attributes, and a view and a map entry for
 * each cost an attach's echo, and a reconcile's dump of every link, most of their parse.
 */
export function parseLink(body: Buffer): Link {
  const link: Link = { index: body.readInt32LE(4), flags: body.readUInt32LE(8), name: '', mtu: 0, mac: '', master: 0, kind: '', alias: '', peerIndex: 0, peerNetnsId: -1 };
  forEachAttr(body, 16, body.length, (type, start, end) => {
    switch (type) {
      case IFLA_IFNAME: link.name = readStringAt(body, start, end); break;
      case IFLA_MTU: link.mtu = body.readUInt32LE(start); break;
      case IFLA_ADDRESS: link.mac = macString(body.subarray(start, end)); break;
      case IFLA_MASTER: link.master = body.readUInt32LE(start); break;
      case IFLA_IFALIAS: link.alias = readStringAt(body, start, end); break;
      case IFLA_LINK: link.peerIndex = body.readInt32LE(start); break;
      case IFLA_LINK_NETNSID: link.peerNetnsId = body.readInt32LE(start); break;
      case IFLA_LINKINFO:
        forEachAttr(body, start, end, (t, s, e) => {
          if (t === IFLA_INFO_KIND) link.kind = readStringAt(body, s, e);
        });
        break;
    }
  });
  return link;
}

/** Asked of every link lookup: no counters in the answer (a veth's are summed over every CPU and queue on each ask). */
const NO_COUNTERS = attrU32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);

export function linkByName(sock: NetlinkSocket, name: string): Link | undefined {
  const req: NetlinkRequest = {
    type: RTM_GETLINK,
    flags: 0,
    what: `get link ${name}`,
    body: Buffer.concat([ifinfomsg(), attrString(IFLA_IFNAME, name), NO_COUNTERS]),
  };
  try {
    const msgs = sock.query(req);
    return msgs.length ? parseLink(msgs[0].body) : undefined;
  } catch (e) {
    if (e instanceof NetlinkError && e.code === 'ENODEV') return undefined;
    throw e;
  }
}

/**
 * Makes a link and returns it as the kernel announces it to the requester (NLM_F_ECHO, Linux
 * 6.3 and later): a lookup saved. Undefined from an older kernel, which announces nothing.
 * For a veth, `peerIndex` is the peer's ifindex in the peer's netns.
 */
export function linkCreate(sock: NetlinkSocket, req: NetlinkRequest, name: string): Link | undefined {
  const announced = sock.query({ ...req, flags: req.flags | NLM_F_ECHO }).filter((m) => m.type === RTM_NEWLINK).map((m) => parseLink(m.body));
  return announced.find((l) => l.name === name);
}

export function linkList(sock: NetlinkSocket): Link[] {
  return sock.dump(RTM_GETLINK, Buffer.concat([ifinfomsg(), NO_COUNTERS]), 'list links').filter((m) => m.type === RTM_NEWLINK).map((m) => parseLink(m.body));
}
