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
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { Claim, contestedClaims, rivalKey } from './contested-cidrs';
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

/** One peer as last planned: its Node's routing fields, its claims parsed, its plans. */
interface PeerEntry {
  key: string;
  claims: { text: string; cidr?: Cidr; error?: string }[];
  /** Which other node contests each claim ('' for none), when the plans were made. */
  rivals: string;
  plans: Planned[];
}

/** What every peer's plan depends on besides the peer: the config and this node. */
interface PlanContext {
  own: (Address & { subnet: Cidr })[];
  underlay?: { ip: string; link: Address };
  selfIps: string[];
}

const peerKey = (p: NodeView): string => `${p.internalIPs.join(',')}\n${p.podCidrs.join(',')}`;

export class PeerNetwork {
  private last: PeerRouteStatus[] = [];
  /** The routes the last sync found gone from the kernel and installed again. */
  restored: PeerRouteStatus[] = [];
  /** Each peer's plan, by Node name, kept while its routing fields and rivals stay the same. */
  private readonly peers = new Map<string, PeerEntry>();
  private context: PlanContext = { own: [], selfIps: [] };
  private contextKey = '';
  /** Which claims contest each other (contested-cidrs.ts), found again only when a claim changes. */
  private rivals = new Map<string, Claim>();
  /** What kni put in the kernel at the last sync: routes by destination, vxlan entries by key. */
  private installed = new Map<string, { index: number; gateway: string }>();
  private neighbours = new Map<string, Neighbour>();
  private vxlanIndex = 0;
  /** Routes kni deleted itself, by destination → when: their kernel notices are not news. */
  private readonly deleted = new Map<string, number>();

  constructor(private readonly sock: NetlinkSocket, private readonly cfg: Config) {}

  status(): PeerRouteStatus[] {
    return this.last;
  }

  /**
   * Makes the kernel hold the routes these peers need; never throws for one route. Work follows
   * what changed: a peer whose Node's routing fields are the same keeps its plan. `verify`
   * (the periodic check, the kernel's notices, the first sync): the kernel is read and compared
   * with the plan, and what drifted is put back; otherwise only the difference from the last
   * sync is written, and nothing is read but this node's addresses.
   */
  sync(self: NodeView, allPeers: NodeView[], verify = true): PeerRouteStatus[] {
    const backend: Backend = this.cfg.backend;
    // backend none: the network's own plugins route between nodes; kni's routes are removed.
    const peers = backend === 'none' ? [] : allPeers.filter((p) => p.name !== self.name);
    const skipIndex = new Set([this.cfg.bridge, this.cfg.vxlan.device].map((n) => linkByName(this.sock, n)?.index ?? -1));
    const own = addrList(this.sock).filter((a) => !skipIndex.has(a.index) && !a.address.startsWith('fe80:') && !a.address.startsWith('127.') && a.address !== '::1');
    const key = JSON.stringify([backend, this.cfg.vxlan, this.cfg.ranges.map((c) => c.text), own.map((a) => [a.index, a.address, a.prefixLength]), self]);
    if (key !== this.contextKey) {
      this.context = this.planContext(self, own);
      this.contextKey = key;
      this.peers.clear();
      verify = true;
    }
    const plans = this.plan(peers).map((p) => ({ ...p, status: { ...p.status }, route: p.route && { ...p.route } }));
    this.restored = [];
    if (verify) this.applyVerified(plans);
    else this.applyDifference(plans);
    this.last = plans.map((p) => p.status);
    return this.last;
  }

  /** The plans of every peer, each peer planned again only when its Node or its rivals changed. */
  private plan(peers: NodeView[]): Planned[] {
    const seen = new Set<string>();
    let claimsChanged = false;
    for (const peer of peers) {
      seen.add(peer.name);
      const k = peerKey(peer);
      const had = this.peers.get(peer.name);
      if (had?.key === k) continue;
      claimsChanged = true;
      const claims = peer.podCidrs.map((text) => {
        try {
          return { text, cidr: parseCidr(text) };
        } catch (e) {
          return { text, error: (e as Error).message };
        }
      });
      this.peers.set(peer.name, { key: k, claims, rivals: '', plans: [] });
    }
    for (const name of [...this.peers.keys()]) {
      if (seen.has(name)) continue;
      this.peers.delete(name);
      claimsChanged = true;
    }
    // The claims that can contest another peer's (a default route is refused on its own).
    if (claimsChanged) {
      this.rivals = contestedClaims(peers.flatMap((p) => this.peers.get(p.name)!.claims.flatMap((c) => (c.cidr?.prefixLength ? [{ node: p.name, cidr: c.cidr }] : []))));
    }
    const out: Planned[] = [];
    for (const peer of peers) {
      const entry = this.peers.get(peer.name)!;
      const rivals = entry.claims.map((c) => (c.cidr ? this.rivals.get(rivalKey(peer.name, c.cidr))?.node ?? '' : '')).join(',');
      if (!entry.plans.length || rivals !== entry.rivals) {
        entry.plans = this.planPeer(peer, entry);
        entry.rivals = rivals;
      }
      out.push(...entry.plans);
    }
    return out;
  }

  /** This node's subnets and the underlay vxlan goes over: its first InternalIP found on one of its links (IPv4 first). */
  private planContext(self: NodeView, ownAddrs: Address[]): PlanContext {
    const own = ownAddrs.map((a) => ({ ...a, subnet: parseCidr(`${a.address}/${a.prefixLength}`) }));
    const selfIps = [...self.internalIPs].sort((a, b) => familyOf(a) - familyOf(b));
    const underlay = selfIps.map((ip) => ({ ip, link: familyOf(ip) ? ownAddrs.find((a) => a.address === canonicalIp(ip)) : undefined })).find((u): u is { ip: string; link: Address } => !!u.link);
    return { own, underlay, selfIps: self.internalIPs };
  }

  /** What one peer's podCIDRs need: a route (and for vxlan its neighbour and FDB entry), or why none. */
  private planPeer(peer: NodeView, entry: PeerEntry): Planned[] {
    const backend = this.cfg.backend;
    const { own, underlay } = this.context;
    const connectedIndex = (ip: string): number | undefined => {
      const p = parseIp(ip);
      for (const a of own) {
        if (a.family !== p.family || a.address === ip) continue;
        if (cidrContains(a.subnet, p.family, p.value)) return a.index;
      }
      return undefined;
    };
    const ownRanges = this.cfg.ranges;
    const plans: Planned[] = [];
    for (const claim of entry.claims) {
      const status: PeerRouteStatus = { node: peer.name, destination: claim.text, backend: '', via: '', device: '', state: 'unreachable', error: '' };
      const planned: Planned = { status, contestable: false };
      plans.push(planned);
      const c = claim.cidr;
      if (!c) {
        status.state = 'failed';
        status.error = `podCIDR ${JSON.stringify(claim.text)}: ${claim.error}`;
        continue;
      }
      status.destination = c.text;
      // A Node object is input: a podCIDR that would take over a route the node lives on (its
      // default route, its own subnets, a route someone else made: checked against the kernel)
      // or that another peer claims is refused, never installed over what is there.
      const subnet = own.find((a) => a.family === c.family && cidrsOverlap(a.subnet, c));
      const rival = this.rivals.get(rivalKey(peer.name, c));
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
        status.error = `vxlan needs an InternalIP of this node (${this.context.selfIps.join(', ') || 'none'}) on one of its links`;
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
    return plans;
  }

  /** The vxlan device when some peer needs it (its routes fail without it), gone when none does. */
  private vxlanFor(overlay: Planned[], ensure: boolean): void {
    if (!overlay.length) {
      if (this.vxlanIndex || ensure) removeVxlanDevice(this.sock, this.cfg.vxlan.device);
      this.vxlanIndex = 0;
      this.neighbours.clear();
      return;
    }
    if (this.vxlanIndex && !ensure) return;
    const { underlay } = this.context;
    try {
      this.vxlanIndex = ensureVxlanDevice(this.sock, this.cfg.vxlan, underlay!.ip, underlay!.link.index).index;
    } catch (e) {
      this.vxlanIndex = 0;
      for (const p of overlay) Object.assign(p.status, { state: 'failed', error: `vxlan device: ${(e as Error).message}` });
      for (const p of overlay) p.route = undefined;
    }
  }

  /** The kernel read and compared with the plan: what is missing is put back, what is stale goes. */
  private applyVerified(plans: Planned[]): void {
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
    const overlay = plans.filter((p) => p.vtep && p.route);
    this.vxlanFor(overlay, true);
    if (this.vxlanIndex) this.syncNeighbours(this.vxlanIndex, overlay);
    for (const p of plans) {
      if (!p.route) continue;
      if (p.vtep) p.route.index = this.vxlanIndex;
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
    this.noteInstalled(plans);
  }

  /** Only what differs from the last sync is written: new or changed routes and entries in, gone ones out. */
  private applyDifference(plans: Planned[]): void {
    const overlay = plans.filter((p) => p.vtep && p.route);
    this.vxlanFor(overlay, false);
    if (this.vxlanIndex) this.neighboursDifference(this.vxlanIndex, overlay);
    const wanted = new Set<string>();
    for (const p of plans) {
      if (!p.route) continue;
      if (p.vtep) p.route.index = this.vxlanIndex;
      wanted.add(p.status.destination);
      const had = this.installed.get(p.status.destination);
      if (had && had.index === p.route.index && had.gateway === p.route.gateway) {
        p.status.state = 'installed';
        continue;
      }
      try {
        // A destination kni has no route to yet is added only where no route to it is in place:
        // one kni did not make is never replaced (the next check names its protocol).
        this.sock.request(peerRouteAdd(p.route, !had));
        p.status.state = 'installed';
      } catch (e) {
        const exists = e instanceof NetlinkError && e.code === 'EEXIST';
        Object.assign(p.status, exists ? { backend: '', via: '', device: '', state: 'failed', error: `a route to ${p.status.destination} that kni did not make is in place; kni does not replace it` } : { state: 'failed', error: (e as Error).message });
        if (exists) p.route = undefined;
      }
    }
    const now = Date.now();
    for (const [destination] of this.installed) {
      if (wanted.has(destination)) continue;
      try {
        this.deleted.set(destination, now);
        this.sock.request(peerRouteDel(parseCidr(destination)));
      } catch {
        // gone already
      }
    }
    this.noteInstalled(plans);
  }

  private noteInstalled(plans: Planned[]): void {
    this.installed = new Map(plans.filter((p) => p.route && p.status.state === 'installed').map((p) => [p.status.destination, { index: p.route!.index, gateway: p.route!.gateway }]));
  }

  /** The vxlan device's entries the plans want against those kni wrote last: the difference written. */
  private neighboursDifference(index: number, overlay: Planned[]): void {
    const wanted = this.wantedNeighbours(index, overlay);
    for (const [key, n] of this.neighbours) {
      if (wanted.has(key)) continue;
      try {
        this.sock.request(neighDel(n));
      } catch {
        // gone already
      }
      this.neighbours.delete(key);
    }
    for (const [key, { n, p }] of wanted) {
      if (this.neighbours.has(key)) continue;
      this.setNeighbour(key, n, p, overlay);
    }
  }

  private wantedNeighbours(index: number, overlay: Planned[]): Map<string, { n: Neighbour; p: Planned }> {
    // Each entry's key → the plan wanting it (an FDB entry serves a peer's routes of both families).
    const wanted = new Map<string, { n: Neighbour; p: Planned }>();
    for (const p of overlay) {
      const v = p.vtep!;
      wanted.set(v.neighKey, { p, n: { family: p.route!.destination.family, index, ip: p.route!.gateway, mac: v.mac } });
      if (!wanted.has(v.fdbKey)) wanted.set(v.fdbKey, { p, n: { family: 'fdb', index, ip: v.ip, mac: v.mac } });
    }
    return wanted;
  }

  private setNeighbour(key: string, n: Neighbour, p: Planned, overlay: Planned[]): void {
    try {
      this.sock.request(neighSet(n));
      this.neighbours.set(key, n);
    } catch (e) {
      // Without its FDB entry neither of the peer's routes works.
      for (const o of n.family === 'fdb' ? overlay.filter((q) => q.vtep!.mac === n.mac) : [p]) {
        Object.assign(o.status, { state: 'failed', error: (e as Error).message });
        o.route = undefined;
      }
    }
  }

  /** The vxlan device's entries read from the kernel: those no plan wants go, the missing ones are written. */
  private syncNeighbours(index: number, overlay: Planned[]): void {
    const wanted = this.wantedNeighbours(index, overlay);
    this.neighbours.clear();
    for (const n of neighList(this.sock, index)) {
      const key = neighKey(n.family, n.ip, n.mac);
      if (wanted.has(key)) {
        this.neighbours.set(key, n);
        continue;
      }
      try {
        this.sock.request(neighDel(n));
      } catch {
        // gone already
      }
    }
    for (const [key, { n, p }] of wanted) if (!this.neighbours.has(key)) this.setNeighbour(key, n, p, overlay);
  }

  /**
   * Whether kni itself deleted the route to this destination in the last 10 s (its kernel
   * notice is then no sign of someone else's hand); each deletion answers once.
   */
  deletedItself(destination: string): boolean {
    const at = this.deleted.get(destination);
    if (at === undefined) return false;
    this.deleted.delete(destination);
    return Date.now() - at < 10_000;
  }

  /** Every RTPROT_KNI route (of `routes`, the main table's) whose destination no peer wants now. */
  private removeStale(keep: Set<string>, routes: Route[]): void {
    const now = Date.now();
    for (const [d, at] of this.deleted) if (now - at >= 10_000) this.deleted.delete(d);
    for (const r of routes) {
      if (r.protocol !== RTPROT_KNI || keep.has(r.destination)) continue;
      try {
        this.deleted.set(r.destination, now);
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
    this.installed.clear();
    this.neighbours.clear();
    this.vxlanIndex = 0;
    this.peers.clear();
    this.contextKey = '';
  }
}
