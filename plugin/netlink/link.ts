// Links (RTM_*LINK, struct ifinfomsg): request builders and lookups.
import type { Family } from '../ipam/ip';
import { forEachAttr, readMacAt, readStringAt } from './attr';
import { BodyWriter, bodyWriter } from './body-writer';
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

/** Writes struct ifinfomsg at the writer's end. */
function ifinfo(w: BodyWriter, index = 0, flags = 0, change = 0, family = AF_UNSPEC): void {
  const at = w.struct(16);
  w.u8At(at, family);
  w.i32At(at + 4, index);
  w.u32At(at + 8, flags);
  w.u32At(at + 12, change);
}

/** A new body that starts with struct ifinfomsg. */
function ifinfomsg(index = 0, flags = 0, change = 0, family = AF_UNSPEC): BodyWriter {
  const w = bodyWriter();
  ifinfo(w, index, flags, change, family);
  return w;
}

const IFLA_BR_MCAST_SNOOPING = 23;

function bridgeInfo(w: BodyWriter, mcastSnooping: boolean): void {
  const info = w.begin(IFLA_LINKINFO);
  w.string(IFLA_INFO_KIND, 'bridge');
  const data = w.begin(IFLA_INFO_DATA);
  w.u8(IFLA_BR_MCAST_SNOOPING, mcastSnooping ? 1 : 0);
  w.end(data);
  w.end(info);
}

/** `mcastSnooping`: see bridgeSetMulticastSnooping. */
export function bridgeAdd(name: string, mtu: number, mac: string, mcastSnooping: boolean): NetlinkRequest {
  const w = ifinfomsg(0, IFF_UP, IFF_UP);
  w.string(IFLA_IFNAME, name);
  w.u32(IFLA_MTU, mtu);
  w.mac(IFLA_ADDRESS, mac);
  bridgeInfo(w, mcastSnooping);
  return { type: RTM_NEWLINK, flags: NLM_F_CREATE | NLM_F_EXCL, what: `add bridge ${name}`, body: w.take() };
}

/**
 * Multicast snooping on a bridge. On, the kernel re-arms every forwarding port's multicast
 * timers whenever any port joins or leaves (br_port_state_selection), so each attach and detach
 * costs time in proportion to the pods already there; off, multicast is flooded to every port,
 * as IPv4 ARP always is.
 */
export function bridgeSetMulticastSnooping(name: string, on: boolean): NetlinkRequest {
  const w = ifinfomsg();
  w.string(IFLA_IFNAME, name);
  bridgeInfo(w, on);
  return { type: RTM_NEWLINK, flags: 0, what: `turn multicast snooping ${on ? 'on' : 'off'} on ${name}`, body: w.take() };
}

/** An ifb device (it re-queues what is redirected to it: a pod's egress is shaped there). */
export function ifbAdd(name: string, alias: string): NetlinkRequest[] {
  const add = ifinfomsg(0, IFF_UP, IFF_UP);
  add.string(IFLA_IFNAME, name);
  const info = add.begin(IFLA_LINKINFO);
  add.string(IFLA_INFO_KIND, 'ifb');
  add.end(info);
  const addBody = add.take();
  const set = ifinfomsg();
  set.string(IFLA_IFNAME, name);
  set.string(IFLA_IFALIAS, alias);
  return [
    { type: RTM_NEWLINK, flags: NLM_F_CREATE | NLM_F_EXCL, what: `add ifb ${name}`, body: addBody },
    { type: RTM_NEWLINK, flags: 0, what: `set alias of ${name}`, body: set.take() },
  ];
}

export interface VxlanSpec {
  name: string;
  vni: number;
  /** The node's own underlay address (IPv4 or IPv6) and the link that carries it. */
  local: { family: Family; value: bigint };
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
  const w = ifinfomsg(0, IFF_UP, IFF_UP);
  w.string(IFLA_IFNAME, v.name);
  w.u32(IFLA_MTU, v.mtu);
  w.mac(IFLA_ADDRESS, v.mac);
  const info = w.begin(IFLA_LINKINFO);
  w.string(IFLA_INFO_KIND, 'vxlan');
  const data = w.begin(IFLA_INFO_DATA);
  w.u32(IFLA_VXLAN_ID, v.vni);
  w.u32(IFLA_VXLAN_LINK, v.underlayIndex);
  w.ip(v.local.family === 4 ? IFLA_VXLAN_LOCAL : IFLA_VXLAN_LOCAL6, v.local.family, v.local.value);
  w.u8(IFLA_VXLAN_LEARNING, 0);
  w.bytes(IFLA_VXLAN_PORT, port);
  w.end(data);
  w.end(info);
  return { type: RTM_NEWLINK, flags: NLM_F_CREATE | NLM_F_EXCL, what: `add vxlan ${v.name} (vni ${v.vni})`, body: w.take() };
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
function oneQueue(w: BodyWriter): void {
  w.u32(IFLA_NUM_TX_QUEUES, 1);
  w.u32(IFLA_NUM_RX_QUEUES, 1);
}

/**
 * A veth pair created in one request: the host end enslaved (brought up by the caller once
 * its settings are in), the peer created directly in the pod netns, one queue each way on
 * both. The peer cannot be brought up here (the kernel answers ENOTCONN): that is done from a
 * socket inside the pod netns.
 */
export function vethAdd(v: VethSpec): NetlinkRequest {
  const w = ifinfomsg();
  w.string(IFLA_IFNAME, v.name);
  if (v.mac) w.mac(IFLA_ADDRESS, v.mac);
  w.u32(IFLA_MTU, v.mtu);
  if (v.master) w.u32(IFLA_MASTER, v.master);
  oneQueue(w);
  const info = w.begin(IFLA_LINKINFO);
  w.string(IFLA_INFO_KIND, 'veth');
  const data = w.begin(IFLA_INFO_DATA);
  const peer = w.begin(VETH_INFO_PEER, false); // struct ifinfomsg and the peer's attributes
  ifinfo(w);
  w.string(IFLA_IFNAME, v.peer.name);
  w.u32(IFLA_MTU, v.mtu);
  w.mac(IFLA_ADDRESS, v.peer.mac);
  w.u32(IFLA_NET_NS_FD, v.peer.netnsFd);
  oneQueue(w);
  w.end(peer);
  w.end(data);
  w.end(info);
  return { type: RTM_NEWLINK, flags: NLM_F_CREATE | NLM_F_EXCL, what: `add veth ${v.name}/${v.peer.name}`, body: w.take() };
}

export function linkSetUp(name: string): NetlinkRequest {
  const w = ifinfomsg(0, IFF_UP, IFF_UP);
  w.string(IFLA_IFNAME, name);
  return { type: RTM_NEWLINK, flags: 0, what: `set ${name} up`, body: w.take() };
}

export function linkSetHairpin(index: number, name: string): NetlinkRequest {
  const w = ifinfomsg(index, 0, 0, AF_BRIDGE);
  const info = w.begin(IFLA_PROTINFO);
  w.u8(IFLA_BRPORT_MODE, 1);
  w.end(info);
  return { type: RTM_SETLINK, flags: 0, what: `set hairpin on ${name}`, body: w.take() };
}

/**
 * No IPv6 link-local address on this link: it then sends no DAD, router solicitation or MLD
 * multicast, which a bridge would flood to every pod port (measured: with 1000 pods each new
 * pod cost the node ~5000 frame copies and the next attach 3× longer). Set before the link is up.
 */
export function linkSetNoLinkLocal(index: number, name: string): NetlinkRequest {
  const w = ifinfomsg(index);
  const spec = w.begin(IFLA_AF_SPEC);
  const inet6 = w.begin(AF_INET6);
  w.u8(IFLA_INET6_ADDR_GEN_MODE, IN6_ADDR_GEN_MODE_NONE);
  w.end(inet6);
  w.end(spec);
  return { type: RTM_NEWLINK, flags: 0, what: `turn off IPv6 link-local on ${name}`, body: w.take() };
}

export function linkSetUpByIndex(index: number, name: string): NetlinkRequest {
  return { type: RTM_NEWLINK, flags: 0, what: `set ${name} up`, body: ifinfomsg(index, IFF_UP, IFF_UP).take() };
}

export function linkSetAlias(index: number, name: string, alias: string): NetlinkRequest {
  const w = ifinfomsg(index);
  w.string(IFLA_IFALIAS, alias);
  return { type: RTM_NEWLINK, flags: 0, what: `set alias of ${name}`, body: w.take() };
}

export function linkSetDownByIndex(index: number, name: string): NetlinkRequest {
  return { type: RTM_NEWLINK, flags: 0, what: `set ${name} down`, body: ifinfomsg(index, 0, IFF_UP).take() };
}

/**
 * Renames a link. By index: a request that names the link by name cannot rename it. Kernels
 * before 6.2 refuse to rename a link that is up (EBUSY).
 */
export function linkRename(index: number, name: string, newName: string): NetlinkRequest {
  const w = ifinfomsg(index);
  w.string(IFLA_IFNAME, newName);
  return { type: RTM_NEWLINK, flags: 0, what: `rename ${name} to ${newName}`, body: w.take() };
}

/** Moves a link (found by name) to a device group, with a new alias, in one request. */
export function linkSetGroup(name: string, group: number, alias: string): NetlinkRequest {
  const w = ifinfomsg();
  w.string(IFLA_IFNAME, name);
  w.u32(IFLA_GROUP, group);
  w.string(IFLA_IFALIAS, alias);
  return { type: RTM_NEWLINK, flags: 0, what: `move ${name} to group ${group}`, body: w.take() };
}

/** Deletes every link of a device group in one request: the kernel unregisters them together. */
export function linkGroupDel(group: number, what: string): NetlinkRequest {
  const w = ifinfomsg();
  w.u32(IFLA_GROUP, group);
  return { type: RTM_DELLINK, flags: 0, what: `delete ${what} (group ${group})`, body: w.take() };
}

/**
 * Deletes a link by name, or by index when one is given (the kernel then ignores the name):
 * ifindexes are not reused, so a link made since under the same name is never hit.
 */
export function linkDel(name: string, index = 0): NetlinkRequest {
  const w = ifinfomsg(index);
  w.string(IFLA_IFNAME, name);
  return { type: RTM_DELLINK, flags: 0, what: `delete link ${name}`, body: w.take() };
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
      case IFLA_ADDRESS: link.mac = readMacAt(body, start, end); break;
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
const noCounters = (w: BodyWriter): void => w.u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);

/** One link asked for by name or index; undefined when there is none. */
function getLink(sock: NetlinkSocket, w: BodyWriter, what: string): Link | undefined {
  noCounters(w);
  try {
    const msgs = sock.query({ type: RTM_GETLINK, flags: 0, what: `get link ${what}`, body: w.take() });
    return msgs.length ? parseLink(msgs[0].body) : undefined;
  } catch (e) {
    if (e instanceof NetlinkError && e.code === 'ENODEV') return undefined;
    throw e;
  }
}

export function linkByName(sock: NetlinkSocket, name: string): Link | undefined {
  const w = ifinfomsg();
  w.string(IFLA_IFNAME, name);
  return getLink(sock, w, name);
}

export function linkByIndex(sock: NetlinkSocket, index: number): Link | undefined {
  return getLink(sock, ifinfomsg(index), String(index));
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
  const w = ifinfomsg();
  noCounters(w);
  return sock.dump(RTM_GETLINK, w.take(), 'list links').filter((m) => m.type === RTM_NEWLINK).map((m) => parseLink(m.body));
}
