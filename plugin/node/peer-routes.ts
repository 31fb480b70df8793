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
import { Claim, ClaimIndex } from './contested-cidrs';
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
  /** A plan with a route: its status once installed (the periodic check finds most plans installed); the others': why none. */
  status: PeerRouteStatus;
  /** vxlan: its index is the device's as last written. */
  route?: PeerRoute;
  /** vxlan: the peer's underlay address (FDB) and its device MAC, and its FDB entry's key (neighKey): one for all the peer's plans. */
  vtep?: Vtep;
  /** vxlan: the key of its neighbour entry (neighKey). */
  neighKey?: string;
  /** Passed every check but the kernel's: refused still where a route kni did not make is in place. */
  contestable: boolean;
}

interface Vtep {
  ip: string;
  mac: string;
  fdbKey: string;
}

/** The longest a sync writes a Node event's changes before leaving the rest to the next. */
const WRITE_SLICE_MS = 20;
/** The longest a sync compares a part of the periodic check with the plans before leaving the rest to the next. */
const CHECK_SLICE_MS = 5;

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

/**
 * Text kept for every peer, as one flat string. Text built by concatenation (formatIp's, a
 * template's) of 13 characters or more is a tree of pieces in V8, each piece an object that
 * every full garbage collection walks: at 5,000 peers, 43,000 of them.
 */
const flat = (s: string): string => Buffer.from(s, 'latin1').toString('latin1');
/** The Node's own text (flat, as JSON.parse makes it) where it is spelled as the kernel spells it: no second copy per peer; else flat(canonical). */
const asNodeSpells = (canonical: string, nodeText: string): string => (canonical === nodeText ? nodeText : flat(canonical));

// Joined, not a template: a join makes one flat string (see flat).
const neighKey = (family: Neighbour['family'], ip: string, mac: string): string => [family, ip, mac].join('/');
/** The vxlan entry a key names (neighKey), on the device of that index: made when written or deleted, not kept. */
function vxlanEntry(key: string, index: number): Neighbour {
  const [family, ip, mac] = key.split('/');
  return { family: family === 'fdb' ? 'fdb' : family === '4' ? 4 : 6, index, ip, mac };
}

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

/** What a check compares plans with: the routes read, those someone else made, kni's, and what kni had installed. */
interface KernelRoutes {
  routes: Route[];
  foreign: Map<string, string>;
  inPlace: Map<string, Route>;
  wasInstalled: Set<string>;
}

/** One peer as last planned: its Node's routing fields, its claims parsed, its plans and their outcome. */
interface PeerEntry {
  /** The Node as it was planned for. */
  view: NodeView;
  claims: { text: string; cidr?: Cidr; error?: string }[];
  /** Which other node's claim contests each claim, when the plans were made. */
  rivalClaims: readonly (Claim | undefined)[];
  /** What each podCIDR needs (never changed once made but for a vxlan route's device index: a new plan replaces it). */
  plans: Planned[];
  /** What the last sync made of each plan. */
  statuses: PeerRouteStatus[];
  /** When kni first saw this peer: of several rivals, the first seen is named. */
  seq: number;
}

/** What the statuses add up to: kept as each peer's change, so that a Node event costs its own peer only. */
export interface PeerSummary {
  /** Routes by `<backend or none> <state>`. */
  counts: ReadonlyMap<string, number>;
  /** The statuses that are not installed. */
  bad: ReadonlySet<PeerRouteStatus>;
  /** Changes whenever a status does. */
  version: number;
}

/** What every peer's plan depends on besides the peer: the config and this node. */
interface PlanContext {
  own: (Address & { subnet: Cidr })[];
  underlay?: { ip: string; link: Address };
  selfIps: string[];
}

const sameList = (a: string[], b: string[]): boolean => a.length === b.length && a.every((x, i) => x === b[i]);
const sameClaim = (a: Claim | undefined, b: Claim | undefined): boolean => a?.node === b?.node && a?.cidr.text === b?.cidr.text;
/** A peer without rivals (nearly every peer) shares this list: an empty list has no rival at any index. */
const NO_RIVALS: readonly (Claim | undefined)[] = Object.freeze([]);
const sameRivals = (a: readonly (Claim | undefined)[], b: readonly (Claim | undefined)[]): boolean => {
  for (let i = 0; i < Math.max(a.length, b.length); i++) if (!sameClaim(a[i], b[i])) return false;
  return true;
};
/** Whether a Node's routing fields are those a peer was planned for. */
export const sameRouting = (a: NodeView, b: NodeView): boolean => sameList(a.internalIPs, b.internalIPs) && sameList(a.podCidrs, b.podCidrs);

/** A vxlan plan's entries' keys: its neighbour's, and its peer's FDB entry's (shared by both families). */
const vxlanKeys = (p: Planned): [string, string] => [p.neighKey!, p.vtep!.fdbKey];

/**
 * What a sync compares with the kernel: everything ('all': the kernel's notices, a relist, the
 * first sync), one part of it (the periodic check goes through them in turn, so that no check
 * holds the event loop long at thousands of peers), or nothing ('difference': a Node event).
 */
export const CHECK_SLICES = ['routes4', 'routes6', 'neighbours4', 'neighbours6', 'fdb'] as const;
export type Check = 'all' | 'difference' | (typeof CHECK_SLICES)[number];

export class PeerNetwork {
  /** Every status in the peers' order, made when asked for after a change (status()). */
  private last?: PeerRouteStatus[];
  /** The routes the last sync found gone from the kernel and installed again. */
  restored: PeerRouteStatus[] = [];
  /** Each peer, by Node name, planned again only when its routing fields or its rivals change; in the order first seen. */
  private readonly peers = new Map<string, PeerEntry>();
  private seq = 0;
  private readonly counts = new Map<string, number>();
  private readonly bad = new Set<PeerRouteStatus>();
  private version = 0;
  /** The peers' podCIDRs routed (not refused), and how they changed since routedChange() last said. */
  private readonly routed = new Set<Cidr>();
  private routedList?: Cidr[];
  private routedAdded = new Set<Cidr>();
  private routedRemoved = new Set<Cidr>();
  private context: PlanContext = { own: [], selfIps: [] };
  private contextKey = '';
  /** Every peer's claims by block (contested-cidrs.ts): which contest a changed one is a few lookups. */
  private claimIndex = new ClaimIndex();
  /** What kni has in the kernel: routes by destination, and the vxlan entries with how many plans use each. */
  private installed = new Map<string, { index: number; gateway: string; plan: Planned }>();
  /** Changes planned and not yet written: a bulk join is written a slice at a time (WRITE_SLICE_MS). */
  private pending: { entry?: PeerEntry; before?: PeerEntry }[] = [];
  /** The entries of `pending` not yet written (a check leaves them to their own turn). */
  private unwritten = new Set<PeerEntry>();
  /**
   * A part of the periodic check under way: each call compares a slice more. At thousands of
   * peers a part goes on a slice at a time (checkSliceMs), with Node events' writes between.
   */
  private partLeft?: () => void;
  /** How long one slice of a check may take (tests make it short). */
  checkSliceMs = CHECK_SLICE_MS;
  /** The vxlan entries kni has written, by key (neighKey) → how many plans use each. */
  private neighbours = new Map<string, number>();
  private vxlanIndex = 0;
  /** Routes kni deleted itself, by destination → when: their kernel notices are not news. */
  private readonly deleted = new Map<string, number>();

  constructor(private readonly sock: NetlinkSocket, private readonly cfg: Config) {}

  /** Every peer's routes, in the order the peers were first seen. */
  status(): PeerRouteStatus[] {
    if (!this.last) {
      const last: PeerRouteStatus[] = [];
      for (const e of this.peers.values()) for (const st of e.statuses) last.push(st);
      this.last = last;
    }
    return this.last;
  }

  /** The statuses counted (kept up to date per peer: no pass over all of them). */
  summary(): PeerSummary {
    return { counts: this.counts, bad: this.bad, version: this.version };
  }

  /** A peer's statuses set, and what they add up to with it: only for the peer's current entry. */
  private setStatuses(e: PeerEntry, statuses: PeerRouteStatus[]): void {
    // A check that finds every route in place hands back the same statuses: nothing to count again.
    if (statuses.length === e.statuses.length && statuses.every((st, i) => st === e.statuses[i])) return;
    const current = this.peers.get(e.view.name) === e;
    if (current) this.count(e, -1);
    e.statuses = statuses;
    if (current) this.count(e, 1);
  }

  /** A peer's statuses added to (1) or taken from (-1) the counts, the bad ones and the routed CIDRs. */
  private count(e: PeerEntry, sign: 1 | -1): void {
    if (!e.statuses.length) return;
    this.version++;
    this.last = undefined;
    e.statuses.forEach((st, i) => {
      const k = `${st.backend || 'none'} ${st.state}`;
      const n = (this.counts.get(k) ?? 0) + sign;
      if (n) this.counts.set(k, n);
      else this.counts.delete(k);
      if (st.state !== 'installed') {
        if (sign > 0) this.bad.add(st);
        else this.bad.delete(st);
      }
      const c = e.claims[i]?.cidr;
      if (!c || st.state === 'failed') return;
      this.routedList = undefined;
      if (sign > 0) {
        this.routed.add(c);
        if (!this.routedRemoved.delete(c)) this.routedAdded.add(c);
      } else {
        this.routed.delete(c);
        if (!this.routedAdded.delete(c)) this.routedRemoved.add(c);
      }
    });
  }

  /** Every peer out of the list (their statuses counted no more) and out of the claims' index. */
  private forgetPeers(): void {
    for (const name of [...this.peers.keys()]) this.putEntry(name, undefined);
    this.claimIndex = new ClaimIndex();
  }

  /** A peer's entry in the list (replacing its last), or out of it: its statuses counted no more. */
  private putEntry(name: string, entry: PeerEntry | undefined): void {
    const had = this.peers.get(name);
    if (had) this.count(had, -1);
    if (entry) this.peers.set(name, entry);
    else this.peers.delete(name);
  }

  /**
   * Makes the kernel hold the routes these peers need; never throws for one route. Work follows
   * what changed: a peer keeps its plan while its Node's routing fields and its rivals stay the
   * same. `check` (see Check): what of the kernel is read and compared with the plans, what
   * drifted put back; with 'difference' only the plans that changed are written (a peer added,
   * changed or gone), and nothing is read but this node's addresses.
   */
  sync(self: NodeView, allPeers: readonly NodeView[] | ReadonlyMap<string, NodeView>, check: Check = 'all'): PeerRouteStatus[] {
    this.apply(self, allPeers, check);
    return this.status();
  }

  /**
   * sync without the list of statuses (the node agent reads summary()). `allPeers`: every Node
   * (this one's too), by name; `changed`: the names of those added, changed or gone since the
   * last sync, when known — then only they are looked at, unless everything is checked.
   */
  apply(self: NodeView, allPeers: readonly NodeView[] | ReadonlyMap<string, NodeView>, check: Check = 'all', changed?: ReadonlySet<string>): void {
    const backend: Backend = this.cfg.backend;
    // backend none: the network's own plugins route between nodes; kni's routes are removed.
    const byName: ReadonlyMap<string, NodeView> = backend === 'none' ? new Map() : allPeers instanceof Map ? allPeers : new Map((allPeers as NodeView[]).map((p) => [p.name, p]));
    const skipIndex = new Set([this.cfg.bridge, this.cfg.vxlan.device].map((n) => linkByName(this.sock, n)?.index ?? -1));
    const own = addrList(this.sock).filter((a) => !skipIndex.has(a.index) && !a.address.startsWith('fe80:') && !a.address.startsWith('127.') && a.address !== '::1');
    const key = JSON.stringify([backend, this.cfg.vxlan, this.cfg.ranges.map((c) => c.text), own.map((a) => [a.index, a.address, a.prefixLength]), self]);
    if (key !== this.contextKey) {
      this.context = this.planContext(self, own);
      this.contextKey = key;
      this.forgetPeers();
      check = 'all';
    }
    const { changed: replanned, gone } = this.plan(byName, self.name, check === 'all' ? undefined : changed);
    this.restored = [];
    // A part of the check begins with what changed since the last sync, written as a Node event's.
    if (check === 'all') {
      this.pending = [];
      this.unwritten.clear();
    } else this.applyDifference(replanned, gone);
    // A part still under way goes on first; a new part waits for the next time round.
    if (check === 'all') this.applyVerified([...this.peers.values()]);
    else if (this.partLeft) this.partLeft();
    else if (check === 'routes4' || check === 'routes6') this.checkRoutes([...this.peers.values()], check === 'routes4' ? 4 : 6);
    else if (check !== 'difference') this.checkNeighbours(check === 'neighbours4' ? 4 : check === 'neighbours6' ? 6 : 'fdb');
  }

  /**
   * The peers' podCIDRs not refused (a default route, say, must not switch masquerading off for
   * what it covers either): the same array as long as it holds the same CIDRs.
   */
  routedCidrs(): Cidr[] {
    this.routedList ??= [...this.routed];
    return this.routedList;
  }

  /** routedCidrs() and what of it came and went since the last call (by identity: a peer planned again brings new objects). */
  routedChange(): { cidrs: Cidr[]; added: Cidr[]; removed: Cidr[] } {
    const out = { cidrs: this.routedCidrs(), added: [...this.routedAdded], removed: [...this.routedRemoved] };
    this.routedAdded = new Set();
    this.routedRemoved = new Set();
    return out;
  }

  /**
   * Each peer's entry brought up to date: planned again when its Node's routing fields or its
   * rivals changed. Returns those planned again (with what they replaced) and those gone.
   */
  private plan(byName: ReadonlyMap<string, NodeView>, self: string, names?: ReadonlySet<string>): { changed: { entry: PeerEntry; before: PeerEntry | undefined }[]; gone: PeerEntry[] } {
    const fresh = new Map<string, PeerEntry | undefined>();
    const gone: PeerEntry[] = [];
    const look = (name: string) => {
      const peer = name === self ? undefined : byName.get(name);
      const had = this.peers.get(name);
      if (!peer) {
        if (!had) return;
        this.putEntry(name, undefined);
        gone.push(had);
        return;
      }
      if (had && (had.view === peer || sameRouting(had.view, peer))) return;
      const claims = peer.podCidrs.map((text) => {
        try {
          const cidr = parseCidr(text);
          cidr.text = asNodeSpells(cidr.text, text);
          return { text, cidr };
        } catch (e) {
          return { text, error: (e as Error).message };
        }
      });
      fresh.set(peer.name, had);
      this.putEntry(peer.name, { view: peer, claims, rivalClaims: NO_RIVALS, plans: [], statuses: [], seq: had?.seq ?? this.seq++ });
    };
    if (names) for (const name of names) look(name);
    else {
      for (const name of byName.keys()) look(name);
      for (const name of [...this.peers.keys()]) if (!byName.has(name)) look(name);
    }
    const changed: { entry: PeerEntry; before: PeerEntry | undefined }[] = [];
    if (!fresh.size && !gone.length) return { changed, gone };
    // The claims that can contest another peer's (a default route is refused on its own). A
    // change may contest, or free, a claim of a peer that did not change: those peers are
    // found by lookup (the claims overlapping the changed ones, before and after).
    const claimsOf = (e: PeerEntry): Claim[] => e.claims.flatMap((c) => (c.cidr?.prefixLength ? [{ node: e.view.name, cidr: c.cidr }] : []));
    const affected = new Set<string>(fresh.keys());
    const touch = (claims: Claim[]) => {
      for (const c of claims) for (const o of this.claimIndex.overlapping(c.node, c.cidr)) affected.add(o.node);
    };
    const before = [...gone, ...[...fresh.values()].filter((e): e is PeerEntry => e !== undefined)];
    for (const e of before) {
      const claims = claimsOf(e);
      touch(claims);
      for (const c of claims) this.claimIndex.remove(c);
    }
    for (const name of fresh.keys()) for (const c of claimsOf(this.peers.get(name)!)) this.claimIndex.add(c);
    for (const name of fresh.keys()) touch(claimsOf(this.peers.get(name)!));
    for (const name of affected) {
      const entry = this.peers.get(name);
      if (!entry) continue;
      const rivalClaims = this.rivalsOf(entry);
      if (!fresh.has(name) && sameRivals(rivalClaims, entry.rivalClaims)) continue;
      const was = fresh.has(name) ? fresh.get(name) : { ...entry };
      entry.rivalClaims = rivalClaims;
      entry.plans = this.planPeer(entry.view, entry);
      changed.push({ entry, before: was });
    }
    return { changed, gone };
  }

  /** For each claim of a peer, the first other peer's claim overlapping it, in the peers' order. */
  private rivalsOf(entry: PeerEntry): readonly (Claim | undefined)[] {
    const place = (o: Claim): [number, number] => [this.peers.get(o.node)?.seq ?? Infinity, this.peers.get(o.node)?.claims.findIndex((c) => c.cidr === o.cidr) ?? 0];
    const rivals = entry.claims.map((c) => {
      if (!c.cidr?.prefixLength) return undefined;
      let first: Claim | undefined;
      let at: [number, number] = [Infinity, Infinity];
      for (const o of this.claimIndex.overlapping(entry.view.name, c.cidr)) {
        const p = place(o);
        if (p[0] < at[0] || (p[0] === at[0] && p[1] < at[1])) {
          first = o;
          at = p;
        }
      }
      return first;
    });
    return rivals.some((r) => r !== undefined) ? rivals : NO_RIVALS;
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
    let vtep: Vtep | undefined;
    for (const [i, claim] of entry.claims.entries()) {
      const status: PeerRouteStatus = { node: peer.name, destination: claim.text, backend: '', via: '', device: '', state: 'unreachable', error: '' };
      // Every field from the start: one added later moves the object's fields to a second store (64 B more per plan).
      const planned: Planned = { status, contestable: false, route: undefined, vtep: undefined, neighKey: undefined };
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
      const rival = entry.rivalClaims[i];
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
        Object.assign(status, { backend: 'host-gw', via: peerIp, state: 'installed' });
        planned.route = { destination: c, gateway: asNodeSpells(canonicalIp(peerIp), peerIp), index: direct, onlink: false };
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
      const gateway = flat(gatewayOf(c));
      Object.assign(status, { backend: 'vxlan', via: gateway, device: this.cfg.vxlan.device, state: 'installed' });
      planned.route = { destination: c, gateway, index: 0, onlink: true };
      if (!vtep) {
        // The MAC is a hash of the address as the Node spells it: the peer hashes the same text for its own device.
        const ip = asNodeSpells(canonicalIp(peerUnderlay), peerUnderlay);
        const mac = vtepMac(peerUnderlay);
        vtep = { ip, mac, fdbKey: neighKey('fdb', ip, mac) };
      }
      planned.vtep = vtep;
      planned.neighKey = neighKey(c.family, gateway, vtep.mac);
    }
    return plans;
  }

  /** The vxlan device when some plan needs it, gone when none does. False when it cannot be made. */
  private vxlanFor(wanted: boolean, ensure: boolean): boolean {
    if (!wanted) {
      if (this.vxlanIndex || ensure) removeVxlanDevice(this.sock, this.cfg.vxlan.device);
      this.vxlanIndex = 0;
      this.neighbours.clear();
      return true;
    }
    if (this.vxlanIndex && !ensure) return true;
    const { underlay } = this.context;
    try {
      this.vxlanIndex = ensureVxlanDevice(this.sock, this.cfg.vxlan, underlay!.ip, underlay!.link.index).index;
      return true;
    } catch (e) {
      this.vxlanIndex = 0;
      this.vxlanProblem = `vxlan device: ${(e as Error).message}`;
      return false;
    }
  }

  private vxlanProblem = '';

  /** A plan's route as it goes to the kernel (a vxlan route through the device as it is now). */
  private routeOf(p: Planned): PeerRoute {
    if (p.vtep) p.route!.index = this.vxlanIndex;
    return p.route!;
  }

  /** Every plan compared with the kernel, read first: what is missing is put back, what is stale goes. */
  private applyVerified(entries: PeerEntry[]): void {
    this.partLeft = undefined;
    // Read before kni's routes change: those it installs below are kept, the others it finds here are stale.
    const kernel = this.readRoutes(mainRoutes(this.sock));
    // The vxlan entries of the plans no route someone else made refuses; one failing fails its plans.
    const outcome = new Map<Planned, PeerRouteStatus>();
    const overlay = entries.flatMap((e) => e.plans.filter((p) => p.vtep && p.route && !(p.contestable && kernel.foreign.has(p.status.destination))));
    this.vxlanFor(overlay.length > 0, true);
    if (this.vxlanIndex) this.syncNeighbours(overlay, outcome);
    this.installed = new Map();
    for (const e of entries) this.setStatuses(e, e.plans.map((p) => outcome.get(p) ?? this.verifyPlan(p, kernel)));
    this.removeStale(this.installed, kernel.routes);
  }

  /**
   * One family's routes read, to be compared with the plans (the vxlan entries as kni wrote them:
   * their own part of the check): what is missing is put back, what is stale goes. A vxlan
   * device made again (gone, or changed) is a full check instead.
   */
  private checkRoutes(entries: PeerEntry[], family: Family): void {
    const overlay = entries.some((e) => e.plans.some((p) => p.vtep && p.route));
    const device = this.vxlanIndex;
    this.vxlanFor(overlay, true);
    if (this.vxlanIndex !== device) return this.applyVerified(entries);
    const kernel = this.readRoutes(routeList(this.sock, family));
    // An entry replaced or gone since the routes were read, or not written yet, is left out: its
    // own turn wrote (or writes) it. What a Node event wrote meanwhile is in `installed`, so the
    // stale routes removed at the end are only those no plan has now.
    const compare = (e: PeerEntry) => {
      if (this.peers.get(e.view.name) !== e || this.unwritten.has(e)) return;
      this.setStatuses(e, e.plans.map((p, i) => {
        if (e.claims[i].cidr?.family !== family) return e.statuses[i] ?? p.status;
        const st = this.verifyPlan(p, kernel);
        if (st.state !== 'installed' && this.installed.get(p.status.destination)?.plan === p) this.installed.delete(p.status.destination);
        return st;
      }));
    };
    this.inSlices(entries, compare, () => this.removeStale(this.installed, kernel.routes));
  }

  /** `each` over the items, a slice now and one more at each call of partLeft; then `then`. */
  private inSlices<T>(items: T[], each: (item: T) => void, then: () => void): void {
    let next = 0;
    const slice = () => {
      const until = performance.now() + this.checkSliceMs;
      while (next < items.length) {
        each(items[next++]);
        if (performance.now() >= until) break;
      }
      if (next < items.length) return;
      this.partLeft = undefined;
      then();
    };
    this.partLeft = slice;
    slice();
  }

  /** What a check compares plans with: the routes read, those someone else made, kni's, and what kni had installed. */
  private readRoutes(routes: Route[]): KernelRoutes {
    return { routes, foreign: foreignRoutes(routes), inPlace: new Map(routes.filter((r) => r.protocol === RTPROT_KNI).map((r) => [r.destination, r])), wasInstalled: new Set(this.installed.keys()) };
  }

  /**
   * One plan compared with the routes a check read: refused where a route someone else made is
   * in place, its route written where missing or changed (a route kni had installed and found
   * gone is named), and noted as installed.
   */
  private verifyPlan(p: Planned, kernel: KernelRoutes): PeerRouteStatus {
    const other = p.contestable ? kernel.foreign.get(p.status.destination) : undefined;
    if (other !== undefined) return { ...p.status, backend: '', via: '', device: '', state: 'failed', error: `a route to ${p.status.destination} that kni did not make is in place (${other}); kni does not replace it` };
    if (!p.route) return p.status;
    if (p.vtep && !this.vxlanIndex) return { ...p.status, state: 'failed', error: this.vxlanProblem || 'vxlan device missing' };
    const route = this.routeOf(p);
    const had = kernel.inPlace.get(p.status.destination);
    if (!had || had.index !== route.index || had.gateway !== route.gateway) {
      try {
        this.sock.request(peerRouteAdd(route));
      } catch (err) {
        return { ...p.status, state: 'failed', error: (err as Error).message };
      }
      if (!had && kernel.wasInstalled.has(p.status.destination)) {
        driftFindings.inc({ object: 'peer_route' });
        this.restored.push(p.status);
        log('warn', `the route to node ${p.status.node}'s pods ${p.status.destination} was gone from the kernel; installed again`, { node: p.status.node, destination: p.status.destination, via: p.status.via });
      }
    }
    this.installed.set(p.status.destination, { index: route.index, gateway: route.gateway, plan: p });
    return p.status;
  }

  /** The vxlan device's entries (of these families) read: those not wanted deleted; the keys of those present returned. */
  private keepOnly(wanted: Map<string, unknown>, families?: Neighbour['family'][]): Set<string> {
    const present = new Set<string>();
    for (const n of neighList(this.sock, this.vxlanIndex, families)) this.keepIfWanted(n, wanted, present);
    return present;
  }

  /** A vxlan entry read from the kernel: noted as present, deleted when not wanted. */
  private keepIfWanted(n: Neighbour, wanted: { has(key: string): boolean }, present: Set<string>): void {
    const key = neighKey(n.family, n.ip, n.mac);
    present.add(key);
    if (wanted.has(key)) return;
    try {
      this.sock.request(neighDel(n));
    } catch {
      // gone already
    }
  }

  /**
   * One family of the vxlan device's entries read and compared with those the plans use, in
   * slices: an entry read that no plan uses now goes; one the plans used when it was read and
   * still use, not read, is written again. Entries written or let go meanwhile are their own
   * turn's.
   */
  private checkNeighbours(family: Neighbour['family']): void {
    if (!this.vxlanIndex) return;
    const read = neighList(this.sock, this.vxlanIndex, [family]);
    const wanted = [...this.neighbours.keys()].filter((key) => key.startsWith(`${family}/`));
    const present = new Set<string>();
    const restore = (key: string) => {
      if (present.has(key) || !this.neighbours.has(key)) return;
      try {
        this.sock.request(neighSet(vxlanEntry(key, this.vxlanIndex)));
        driftFindings.inc({ object: 'peer_route' });
        log('warn', `a vxlan entry of kni's was gone from the kernel; written again`, { entry: key });
      } catch (e) {
        log('error', "a vxlan entry of kni's cannot be written again; the next check retries", { entry: key, error: (e as Error).message });
      }
    };
    this.inSlices(read, (n) => this.keepIfWanted(n, this.neighbours, present), () => this.inSlices(wanted, restore, () => undefined));
  }

  /**
   * Only the plans that changed are written, in the order they changed: a new plan's route and
   * vxlan entries in, then the plan it replaces (or a gone peer's) out, unless the new one keeps
   * them. A destination kni has no route to yet is added only where no route to it is in place:
   * one kni did not make is never replaced (the next check names its protocol). At most
   * WRITE_SLICE_MS of writes a sync: the rest waits for the next (pendingWrites), so that a bulk
   * join never holds the event loop long.
   */
  private applyDifference(changed: { entry: PeerEntry; before: PeerEntry | undefined }[], gone: PeerEntry[]): void {
    for (const e of gone) this.pending.push({ before: e });
    for (const c of changed) {
      this.pending.push({ entry: c.entry, before: c.before });
      this.unwritten.add(c.entry);
    }
    const until = performance.now() + WRITE_SLICE_MS;
    while (this.pending.length && performance.now() < until) {
      const { entry, before } = this.pending.shift()!;
      if (entry) {
        this.unwritten.delete(entry);
        this.writeEntry(entry);
      }
      if (before) this.dropEntry(before);
    }
    const wantsOverlay = (e: PeerEntry) => e.plans.some((p) => p.vtep && p.route);
    if (this.vxlanIndex && !this.neighbours.size && !this.pending.length && ![...this.peers.values()].some(wantsOverlay)) this.vxlanFor(false, false);
  }

  /** Whether changes or a part of the check wait for the next sync (a bulk join's next slice). */
  pendingWrites(): boolean {
    return this.pending.length > 0 || this.partLeft !== undefined;
  }

  /** A peer's new plans written: each one's vxlan entries and route. */
  private writeEntry(e: PeerEntry): void {
    // The device for the first vxlan peer (the others' plans are as they were).
    if (!this.vxlanIndex && e.plans.some((p) => p.vtep && p.route)) this.vxlanFor(true, false);
    this.setStatuses(e, e.plans.map((p) => {
      if (!p.route) return p.status;
      if (p.vtep && !this.vxlanIndex) return { ...p.status, state: 'failed', error: this.vxlanProblem || 'vxlan device missing' };
      if (p.vtep) {
        const problem = this.useNeighbours(p);
        if (problem) return { ...p.status, state: 'failed', error: problem };
      }
      const route = this.routeOf(p);
      const had = this.installed.get(p.status.destination);
      if (!had || had.index !== route.index || had.gateway !== route.gateway) {
        try {
          this.sock.request(peerRouteAdd(route, !had));
        } catch (err) {
          if (p.vtep) this.dropNeighbours(p);
          const exists = err instanceof NetlinkError && err.code === 'EEXIST';
          return exists ? { ...p.status, backend: '', via: '', device: '', state: 'failed', error: `a route to ${p.status.destination} that kni did not make is in place; kni does not replace it` } : { ...p.status, state: 'failed', error: (err as Error).message };
        }
      }
      this.installed.set(p.status.destination, { index: route.index, gateway: route.gateway, plan: p });
      return p.status;
    }));
  }

  /** A replaced or gone peer's plans let go: their vxlan entries, and each route no newer plan has taken over. */
  private dropEntry(e: PeerEntry): void {
    const now = Date.now();
    e.plans.forEach((p, i) => {
      if (e.statuses[i]?.state !== 'installed') return;
      if (p.vtep) this.dropNeighbours(p);
      const d = p.status.destination;
      if (this.installed.get(d)?.plan !== p) return;
      this.installed.delete(d);
      try {
        this.deleted.set(d, now);
        this.sock.request(peerRouteDel(parseCidr(d)));
      } catch {
        // gone already
      }
    });
  }

  /** A plan's vxlan entries written where no other plan has them yet; the error when one cannot be. */
  private useNeighbours(p: Planned): string {
    const keys = vxlanKeys(p);
    for (const key of keys) {
      if (this.neighbours.has(key)) continue;
      try {
        this.sock.request(neighSet(vxlanEntry(key, this.vxlanIndex)));
      } catch (e) {
        return (e as Error).message;
      }
      this.neighbours.set(key, 0);
    }
    for (const key of keys) this.neighbours.set(key, this.neighbours.get(key)! + 1);
    return '';
  }

  /** A plan's vxlan entries let go: deleted when no plan uses them any more. */
  private dropNeighbours(p: Planned): void {
    for (const key of vxlanKeys(p)) {
      const users = this.neighbours.get(key);
      if (users === undefined) continue;
      if (users > 1) {
        this.neighbours.set(key, users - 1);
        continue;
      }
      this.neighbours.delete(key);
      try {
        this.sock.request(neighDel(vxlanEntry(key, this.vxlanIndex)));
      } catch {
        // gone already
      }
    }
  }

  /** The vxlan device's entries read from the kernel: those no plan wants go, the missing ones are written. */
  private syncNeighbours(overlay: Planned[], outcome: Map<Planned, PeerRouteStatus>): void {
    const index = this.vxlanIndex;
    const wanted = new Map<string, Planned[]>();
    for (const p of overlay) {
      if (outcome.has(p)) continue;
      for (const key of vxlanKeys(p)) {
        const users = wanted.get(key);
        if (users) users.push(p);
        else wanted.set(key, [p]);
      }
    }
    const present = this.keepOnly(wanted);
    const failed = new Set<Planned>();
    for (const [key, users] of wanted) {
      if (present.has(key)) continue;
      try {
        this.sock.request(neighSet(vxlanEntry(key, index)));
      } catch (e) {
        // Without its FDB entry neither of the peer's routes works.
        for (const p of users) {
          outcome.set(p, { ...p.status, state: 'failed', error: (e as Error).message });
          failed.add(p);
        }
      }
    }
    this.neighbours = new Map();
    for (const [key, users] of wanted) {
      const using = failed.size ? users.filter((p) => !failed.has(p)).length : users.length;
      if (using) this.neighbours.set(key, using);
    }
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
  private removeStale(keep: { has(destination: string): boolean }, routes: Route[]): void {
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
    this.forgetPeers();
    this.installed.clear();
    this.pending = [];
    this.unwritten.clear();
    this.partLeft = undefined;
    this.neighbours.clear();
    this.vxlanIndex = 0;
    this.contextKey = '';
  }
}
