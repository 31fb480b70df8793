// Routes to every other node's pods (flannel's model: backends behind one plan). For each
// peer pod CIDR: host-gw — a route via the peer's address when that address is on a subnet
// this node is directly connected to; vxlan — a route through kni's vxlan device to the
// peer's gateway address, with the neighbour and FDB entries written ahead. `auto` picks
// host-gw per peer where it can. Everything kni installs carries RTPROT_KNI, so a sync (and
// the first one after a start) removes what no peer wants any more. All over rtnetlink.
import { Backend, Config } from '../core/config';
import { log } from '../core/log';
import { driftFindings } from '../observe/metrics';
import { Cidr, cidrContains, cidrsOverlap, Family, formatIp, parseCidr, parseIp } from '../ipam/ip';
import { Address, addrList } from '../netlink/addr';
import { linkByName } from '../netlink/link';
import { neighDel, neighList, Neighbour, neighSet } from '../netlink/neigh';
import { PeerRoute, peerRouteAdd, peerRouteDel, Route, routeList, RTPROT_KNI } from '../netlink/route';
import { NetlinkSocket } from '../netlink/socket';
import { contestedClaims, rivalKey } from './contested-cidrs';
import { ensureVxlanDevice, removeVxlanDevice, vtepMac } from './vxlan-device';

/** What kni needs of a Node: its name, InternalIPs and spec.podCIDRs. */
export interface NodeView {
  name: string;
  internalIPs: string[];
  podCidrs: string[];
}

export interface PeerRouteStatus {
  node: string;
  destination: string;
  backend: 'host-gw' | 'vxlan' | '';
  via: string;
  device: string;
  state: 'installed' | 'failed' | 'unreachable';
  error: string;
}

interface Planned {
  status: PeerRouteStatus;
  route?: PeerRoute;
  /** vxlan: the peer's underlay address (FDB) and its device MAC; the neighbour and FDB entries' keys (neighKey). */
  vtep?: { ip: string; mac: string; neighKey: string; fdbKey: string };
  /** Passed every check but the kernel's: refused still where a route kni did not make is in place. */
  contestable: boolean;
}

/** An address's family; 0 for text that is not an IP address (a Node's status is input too). */
const familyOf = (ip: string): Family | 0 => {
  try {
    return parseIp(ip).family;
  } catch {
    return 0;
  }
};

/** The InternalIPs of a Node that are not IP addresses, for a route's error. */
const notIps = (v: NodeView): string => {
  const bad = v.internalIPs.filter((ip) => !familyOf(ip));
  return bad.length ? ` (${bad.map((b) => JSON.stringify(b)).join(', ')} ${bad.length > 1 ? 'are' : 'is'} not an IP address)` : '';
};

/** The first address of a pod CIDR: the peer's gateway (kni's IPAM gives it to the bridge). */
export const gatewayOf = (c: Cidr): string => formatIp(c.family, c.base + 1n);

/**
 * An address as the kernel's dumps spell it (RFC 5952): what kni plans is compared with what it
 * reads as text, and a Node's status may spell an address otherwise ("fd00:0:0::1").
 */
const canonicalIp = (ip: string): string => {
  const p = parseIp(ip);
  return formatIp(p.family, p.value);
};

const neighKey = (family: Neighbour['family'], ip: string, mac: string): string => `${family}/${ip}/${mac}`;

const PROTOCOL_NAMES: Record<number, string> = { 2: 'proto kernel', 3: 'proto boot', 4: 'proto static' };

/** The main table's routes of both families (one dump a sync: ≈ 2 per pod on a routed node). */
const mainRoutes = (sock: NetlinkSocket): Route[] => ([4, 6] as Family[]).flatMap((f) => routeList(sock, f));

/** The routes kni did not make, by canonical destination → their protocol. */
function foreignRoutes(routes: Route[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const r of routes) {
    if (r.protocol === RTPROT_KNI || !r.destination.includes('/')) continue;
    out.set(parseCidr(r.destination).text, PROTOCOL_NAMES[r.protocol] ?? `proto ${r.protocol}`);
  }
  return out;
}

export class PeerNetwork {
  private last: PeerRouteStatus[] = [];
  /** The routes the last sync found gone from the kernel and installed again. */
  restored: PeerRouteStatus[] = [];
  /** The last plan, and what it was made for (plan()). */
  private planned: { plans: Planned[]; underlay?: { ip: string; link: Address } } = { plans: [] };
  private plannedFor = '';

  constructor(private readonly sock: NetlinkSocket, private readonly cfg: Config) {}

  status(): PeerRouteStatus[] {
    return this.last;
  }

  /** Makes the kernel hold exactly the routes these peers need. Never throws for one route. */
  sync(self: NodeView, allPeers: NodeView[]): PeerRouteStatus[] {
    const backend: Backend = this.cfg.backend;
    // backend none: the network's own plugins route between nodes; kni's routes are removed.
    const peers = backend === 'none' ? [] : allPeers;
    const skipIndex = new Set([this.cfg.bridge, this.cfg.vxlan.device].map((n) => linkByName(this.sock, n)?.index ?? -1));
    const own = addrList(this.sock).filter((a) => !skipIndex.has(a.index) && !a.address.startsWith('fe80:') && !a.address.startsWith('127.') && a.address !== '::1');
    // The plan is a function of the Nodes, the config and this node's addresses: the periodic
    // check (and a sync that changed none of them: a watch's relist) reuses it, and only reads
    // the kernel.
    const key = JSON.stringify([backend, this.cfg.vxlan, this.cfg.ranges.map((c) => c.text), own.map((a) => [a.index, a.address, a.prefixLength]), self, peers]);
    if (key !== this.plannedFor) {
      this.planned = this.plan(self, peers, own);
      this.plannedFor = key;
    }
    const { underlay } = this.planned;
    const plans: Planned[] = this.planned.plans.map((p) => ({ ...p, status: { ...p.status }, route: p.route && { ...p.route } }));
    // Read before kni's routes change: those it installs below are kept, the others it finds here are stale.
    const routes = mainRoutes(this.sock);
    const foreign = foreignRoutes(routes);
    for (const p of plans) {
      const other = p.contestable ? foreign.get(p.status.destination) : undefined;
      if (other === undefined) continue;
      Object.assign(p.status, { backend: '', via: '', device: '', state: 'failed', error: `a route to ${p.status.destination} that kni did not make is in place (${other}); kni does not replace it` });
      p.route = undefined;
      p.vtep = undefined;
    }

    // What is in place already is left as it is (a periodic sync writes nothing); a route that
    // was in place and is gone (a link that went down takes its routes along) is named.
    const inPlace = new Map(routes.filter((r) => r.protocol === RTPROT_KNI).map((r) => [r.destination, r]));
    const wasInstalled = new Set(this.last.filter((s) => s.state === 'installed').map((s) => s.destination));
    this.restored = [];

    const overlay = plans.filter((p) => p.vtep && p.route);
    let vxlanIndex = 0;
    if (overlay.length) {
      try {
        vxlanIndex = ensureVxlanDevice(this.sock, this.cfg.vxlan, underlay!.ip, underlay!.link.index).index;
      } catch (e) {
        for (const p of overlay) Object.assign(p.status, { state: 'failed', error: `vxlan device: ${(e as Error).message}` });
        for (const p of overlay) p.route = undefined;
      }
    } else removeVxlanDevice(this.sock, this.cfg.vxlan.device);
    if (vxlanIndex) this.syncNeighbours(vxlanIndex, overlay);

    for (const p of plans) {
      if (!p.route) continue;
      if (p.vtep) p.route.index = vxlanIndex;
      const had = inPlace.get(p.status.destination);
      if (had && had.index === p.route.index && had.gateway === p.route.gateway) {
        p.status.state = 'installed';
        continue;
      }
      try {
        this.sock.request(peerRouteAdd(p.route));
        p.status.state = 'installed';
        if (!had && wasInstalled.has(p.status.destination)) {
          driftFindings.inc({ object: 'peer_route' });
          this.restored.push(p.status);
          log('warn', `the route to node ${p.status.node}'s pods ${p.status.destination} was gone from the kernel; installed again`, { node: p.status.node, destination: p.status.destination, via: p.status.via });
        }
      } catch (e) {
        Object.assign(p.status, { state: 'failed', error: (e as Error).message });
      }
    }
    this.removeStale(new Set(plans.filter((p) => p.status.state === 'installed').map((p) => p.status.destination)), routes);
    this.last = plans.map((p) => p.status);
    return this.last;
  }

  /** What each peer's podCIDRs need: a route (and for vxlan its neighbour and FDB entry), or why none. */
  private plan(self: NodeView, peers: NodeView[], ownAddrs: Address[]): { plans: Planned[]; underlay?: { ip: string; link: Address } } {
    const backend = this.cfg.backend;
    const own = ownAddrs.map((a) => ({ ...a, subnet: parseCidr(`${a.address}/${a.prefixLength}`) }));
    const connectedIndex = (ip: string): number | undefined => {
      const p = parseIp(ip);
      for (const a of own) {
        if (a.family !== p.family || a.address === ip) continue;
        if (cidrContains(a.subnet, p.family, p.value)) return a.index;
      }
      return undefined;
    };
    // The underlay: this node's first InternalIP found on one of its links (IPv4 first).
    const selfIps = [...self.internalIPs].sort((a, b) => familyOf(a) - familyOf(b));
    const underlay = selfIps.map((ip) => ({ ip, link: familyOf(ip) ? ownAddrs.find((a) => a.address === canonicalIp(ip)) : undefined })).find((u): u is { ip: string; link: Address } => !!u.link);
    const ownRanges = this.cfg.ranges;
    // The claims that can contest another peer's (a default route is refused on its own).
    const rivals = contestedClaims(peers.filter((p) => p.name !== self.name).flatMap((p) => p.podCidrs.flatMap((t) => {
      try {
        const cidr = parseCidr(t);
        return cidr.prefixLength ? [{ node: p.name, cidr }] : [];
      } catch {
        return [];
      }
    })));

    const plans: Planned[] = [];
    for (const peer of peers) {
      if (peer.name === self.name) continue;
      for (const text of peer.podCidrs) {
        const status: PeerRouteStatus = { node: peer.name, destination: text, backend: '', via: '', device: '', state: 'unreachable', error: '' };
        const planned: Planned = { status, contestable: false };
        plans.push(planned);
        let c: Cidr;
        try {
          c = parseCidr(text);
        } catch (e) {
          status.state = 'failed';
          status.error = `podCIDR ${JSON.stringify(text)}: ${(e as Error).message}`;
          continue;
        }
        status.destination = c.text;
        // A Node object is input: a podCIDR that would take over a route the node lives on (its
        // default route, its own subnets, a route someone else made: checked against the kernel
        // at each sync) or that another peer claims is refused, never installed with
        // NLM_F_REPLACE over what is there.
        const subnet = own.find((a) => a.family === c.family && cidrsOverlap(a.subnet, c));
        const rival = rivals.get(rivalKey(peer.name, c));
        const refusal =
          c.prefixLength === 0 ? `podCIDR ${c.text} is a default route, never a pod range`
          : ownRanges.some((o) => cidrsOverlap(o, c)) ? `overlaps this node's pod range`
          : subnet ? `overlaps this node's own subnet ${subnet.address}/${subnet.prefixLength}`
          : rival ? `overlaps node ${rival.node}'s podCIDR ${rival.cidr.text}`
          : '';
        if (refusal) {
          status.state = 'failed';
          status.error = refusal;
          continue;
        }
        planned.contestable = true;
        const peerIp = peer.internalIPs.find((ip) => familyOf(ip) === c.family);
        const direct = peerIp ? connectedIndex(peerIp) : undefined;
        if (backend === 'host-gw' || (backend === 'auto' && direct !== undefined)) {
          if (peerIp === undefined || direct === undefined) {
            status.error = peerIp ? `InternalIP ${peerIp} is not on a subnet this node is connected to (host-gw needs one; backend auto would use vxlan)` : `the node has no IPv${c.family} InternalIP${notIps(peer)}`;
            continue;
          }
          Object.assign(status, { backend: 'host-gw', via: peerIp });
          planned.route = { destination: c, gateway: canonicalIp(peerIp), index: direct, onlink: false };
          continue;
        }
        if (!underlay) {
          status.error = `vxlan needs an InternalIP of this node (${self.internalIPs.join(', ') || 'none'}) on one of its links`;
          continue;
        }
        const peerUnderlay = peer.internalIPs.find((ip) => familyOf(ip) === underlay.link.family);
        if (!peerUnderlay) {
          status.error = `the node has no IPv${underlay.link.family} InternalIP to reach over vxlan${notIps(peer)}`;
          continue;
        }
        Object.assign(status, { backend: 'vxlan', via: gatewayOf(c), device: this.cfg.vxlan.device });
        planned.route = { destination: c, gateway: gatewayOf(c), index: 0, onlink: true };
        // The MAC is a hash of the address as the Node spells it: the peer hashes the same text for its own device.
        const vtep = { ip: canonicalIp(peerUnderlay), mac: vtepMac(peerUnderlay) };
        planned.vtep = { ...vtep, neighKey: neighKey(c.family, planned.route.gateway, vtep.mac), fdbKey: neighKey('fdb', vtep.ip, vtep.mac) };
      }
    }
    return { plans, underlay };
  }

  private syncNeighbours(index: number, overlay: Planned[]): void {
    // Each entry's key → the plan wanting it (an FDB entry serves a peer's routes of both families).
    const wanted = new Map<string, { p: Planned; fdb: boolean }>();
    for (const p of overlay) {
      wanted.set(p.vtep!.neighKey, { p, fdb: false });
      if (!wanted.has(p.vtep!.fdbKey)) wanted.set(p.vtep!.fdbKey, { p, fdb: true });
    }
    const present = new Set<string>();
    for (const n of neighList(this.sock, index)) {
      const key = neighKey(n.family, n.ip, n.mac);
      present.add(key);
      if (wanted.has(key)) continue;
      try {
        this.sock.request(neighDel(n));
      } catch {
        // gone already
      }
    }
    for (const [key, { p, fdb }] of wanted) {
      if (present.has(key)) continue;
      const vtep = p.vtep!;
      try {
        this.sock.request(neighSet(fdb ? { family: 'fdb', index, ip: vtep.ip, mac: vtep.mac } : { family: p.route!.destination.family, index, ip: p.route!.gateway, mac: vtep.mac }));
      } catch (e) {
        // Without its FDB entry neither of the peer's routes works.
        for (const o of fdb ? overlay.filter((q) => q.vtep!.mac === vtep.mac) : [p]) {
          Object.assign(o.status, { state: 'failed', error: (e as Error).message });
          o.route = undefined;
        }
      }
    }
  }

  /** Every RTPROT_KNI route (of `routes`, the main table's) whose destination no peer wants now. */
  private removeStale(keep: Set<string>, routes: Route[]): void {
    for (const r of routes) {
      if (r.protocol !== RTPROT_KNI || keep.has(r.destination)) continue;
      try {
        this.sock.request(peerRouteDel(parseCidr(r.destination)));
      } catch {
        // gone already
      }
    }
  }

  /** Everything kni made for peers (kni removed from the node). */
  teardown(): void {
    this.removeStale(new Set(), mainRoutes(this.sock));
    removeVxlanDevice(this.sock, this.cfg.vxlan.device);
    this.last = [];
  }
}
