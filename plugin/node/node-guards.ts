// kni's nftables tables (named `kni`, in the inet and bridge families), which keep pods and
// the outside from fooling or hurting the node:
// - pod-source: a packet a pod sends must carry one of that pod's own addresses. A pod with
//   CAP_NET_RAW (containerd grants it) could otherwise send with another pod's, the gateway's or
//   any outside address, and fool whatever trusts a source address (policy, logs, the peers'
//   probes). Keyed by the pod's host end and address (sets of `ifname . address`), so one lookup
//   per packet whatever the number of pods; IPv6 link-local and the unspecified address (duplicate
//   address detection) pass. Routed host ends are checked in the inet family's prerouting, bridge
//   ports in the bridge family's (pod to pod on one bridge is never routed), ARP's sender address
//   there too. Strict reverse-path filtering would serve routed IPv4 only (it is per interface,
//   the larger of `all` and the link's, and IPv6 has none), not bridged pods.
// - probe-port: the peer probe's port (peer-probe.ts) takes connections only from other nodes'
//   pod gateways (set peers4/peers6) and the node itself: no pod, here or elsewhere, can open
//   one, so none can hold kni's file descriptors or read the node's name from its greeting.
// The tables are written whole with `nft -f` (atomically: one transaction) at node setup and when
// reconcile finds them changed; a pod's elements are added and removed over nfnetlink
// (nft-set.ts) inside its attach and detach, before the answer. The kernel keeps the tables
// while kni is down, so a restart opens no window.
import { familyOf } from '../ipam/ip';
import { nftApply } from './iptables';
import { addressKey, concatKey, ifnameKey, NftFamily, SetElements, updateSetElements } from '../netlink/nft-set';
import { nftTables } from '../netlink/nftables';
import { NETLINK_NETFILTER, NetlinkSocket } from '../netlink/socket';
import type { InterfaceRecord } from '../store/records';

export const GUARD_TABLE = 'kni';

/** A pod's host end and the addresses its packets may carry. */
export interface GuardedEnd {
  hostVeth: string;
  /** Routed (checked in the inet table) or a bridge port (the bridge table). */
  routed: boolean;
  addresses: string[];
}

/** An interface's host end as the source check knows it. */
export const guardedEnd = (i: Pick<InterfaceRecord, 'hostVeth' | 'routed' | 'addresses'>): GuardedEnd => ({ hostVeth: i.hostVeth, routed: !!i.routed, addresses: i.addresses.map((a) => a.address) });

const tableOf = (e: GuardedEnd): NftFamily => (e.routed ? 'inet' : 'bridge');

/** The sets' elements of some host ends, per family and set. */
function elementsOf(ends: GuardedEnd[]): SetElements[] {
  const out: SetElements[] = [];
  for (const family of ['inet', 'bridge'] as const) {
    const mine = ends.filter((e) => tableOf(e) === family);
    if (!mine.length) continue;
    const src = (f: 4 | 6) => mine.flatMap((e) => e.addresses.filter((a) => familyOf(a) === f).map((a) => concatKey(ifnameKey(e.hostVeth), addressKey(a))));
    out.push({ family, table: GUARD_TABLE, set: 'ends', keys: mine.map((e) => ifnameKey(e.hostVeth)) });
    out.push({ family, table: GUARD_TABLE, set: 'src4', keys: src(4) });
    out.push({ family, table: GUARD_TABLE, set: 'src6', keys: src(6) });
  }
  return out;
}

const quoted = (s: string): string => `"${s.replace(/[^A-Za-z0-9._-]/g, '')}"`;
const list = (items: string[]): string => (items.length ? ` elements = { ${items.join(', ')} }` : '');

/** The nft script that makes both tables exactly so (kept as one transaction by nft -f). */
export function guardsScript(probePort: number, ends: GuardedEnd[], peers: string[]): string {
  const sets = (family: NftFamily): string => {
    const mine = ends.filter((e) => tableOf(e) === family);
    const src = (f: 4 | 6) => mine.flatMap((e) => e.addresses.filter((a) => familyOf(a) === f).map((a) => `${quoted(e.hostVeth)} . ${a}`));
    return [
      `  set ends { type ifname;${list(mine.map((e) => quoted(e.hostVeth)))} }`,
      `  set src4 { type ifname . ipv4_addr;${list(src(4))} }`,
      `  set src6 { type ifname . ipv6_addr;${list(src(6))} }`,
    ].join('\n');
  };
  const drop = 'counter drop comment "kni: a pod sent with a source address that is not its own"';
  const lines = [
    `table inet ${GUARD_TABLE} {}`,
    `delete table inet ${GUARD_TABLE}`,
    `table inet ${GUARD_TABLE} {`,
    sets('inet'),
    `  set peers4 { type ipv4_addr;${list(peers.filter((p) => familyOf(p) === 4))} }`,
    `  set peers6 { type ipv6_addr;${list(peers.filter((p) => familyOf(p) === 6))} }`,
    '  chain pod-source {',
    '    type filter hook prerouting priority raw - 10; policy accept;',
    '    iifname != @ends return',
    '    ip6 saddr { ::, fe80::/10 } return',
    '    iifname . ip saddr @src4 return',
    '    iifname . ip6 saddr @src6 return',
    `    ${drop}`,
    '  }',
    // route_localnet (set for host ports on 127.0.0.1) would also take 127.0.0.0/8 from outside.
    '  chain localnet {',
    '    type filter hook prerouting priority raw - 10; policy accept;',
    '    iifname != "lo" ip daddr 127.0.0.0/8 counter drop comment "kni: 127.0.0.0/8 only from the node itself"',
    '  }',
    '  chain probe-port {',
    '    type filter hook input priority filter - 10; policy accept;',
    '    iifname "lo" return',
    ...(probePort
      ? [
          `    tcp dport ${probePort} ip saddr != @peers4 counter drop comment "kni: the peer probe's port is for other nodes' kni only"`,
          `    tcp dport ${probePort} ip6 saddr != @peers6 counter drop comment "kni: the peer probe's port is for other nodes' kni only"`,
        ]
      : []),
    '  }',
    '}',
    `table bridge ${GUARD_TABLE} {}`,
    `delete table bridge ${GUARD_TABLE}`,
    `table bridge ${GUARD_TABLE} {`,
    sets('bridge'),
    '  chain pod-source {',
    '    type filter hook prerouting priority -310; policy accept;',
    '    iifname != @ends return',
    '    arp saddr ip 0.0.0.0 return',
    '    iifname . arp saddr ip @src4 return',
    '    iifname . ip saddr @src4 return',
    '    ip6 saddr { ::, fe80::/10 } return',
    '    iifname . ip6 saddr @src6 return',
    `    ether type { ip, ip6, arp, 8021q, 8021ad } ${drop}`,
    '  }',
    '}',
    '',
  ];
  return lines.join('\n');
}

export class NodeGuards {
  private sock?: NetlinkSocket;
  /** The peers' gateways in the sets now. */
  private peers = new Set<string>();
  private port = 0;

  /** The socket, opened on first use in the calling thread's netns: the node's (the daemon's). */
  private socket(): NetlinkSocket {
    this.sock ??= new NetlinkSocket(NETLINK_NETFILTER);
    return this.sock;
  }

  /** Both tables written whole: the pods' ends, the peers' gateways and the probe's port. */
  async write(probePort: number, ends: GuardedEnd[], peers: string[]): Promise<void> {
    await nftApply(guardsScript(probePort, ends, peers), "kni's node guards (the pods' source check, the probe port)");
    this.port = probePort;
    this.peers = new Set(peers);
  }

  /** A pod's end and its addresses into the source check (its attach, before the answer). */
  add(end: GuardedEnd): void {
    updateSetElements(this.socket(), elementsOf([end]));
  }

  /** Out of it (its detach); already gone is fine. */
  remove(end: GuardedEnd): void {
    updateSetElements(this.socket(), [], elementsOf([end]));
  }

  /** The peers' pod gateways the probe's port takes connections from, by those that came and went. */
  changePeers(come: string[], gone: string[]): void {
    const coming = new Set(come);
    const add = [...coming].filter((g) => !this.peers.has(g));
    const del = gone.filter((g) => this.peers.has(g) && !coming.has(g));
    if (!add.length && !del.length) return;
    const sets = (l: string[]): SetElements[] =>
      ([4, 6] as const).map((f) => ({ family: 'inet', table: GUARD_TABLE, set: `peers${f}`, keys: l.filter((g) => familyOf(g) === f).map(addressKey) }));
    updateSetElements(this.socket(), sets(add), sets(del));
    for (const g of del) this.peers.delete(g);
    for (const g of add) this.peers.add(g);
  }

  /** The peers' pod gateways the probe's port takes connections from: only the difference is written. */
  setPeers(gateways: string[]): void {
    const want = new Set(gateways);
    this.changePeers([...want], [...this.peers].filter((g) => !want.has(g)));
  }

  get probePort(): number {
    return this.port;
  }

  /** What of the tables is missing now (reconcile's: one netlink dump). */
  drift(): string[] {
    const have = new Set(nftTables().map((t) => `${t.family} ${t.name}`));
    return (['inet', 'bridge'] as const).filter((f) => !have.has(`${f} ${GUARD_TABLE}`)).map((f) => `nftables table ${f} ${GUARD_TABLE} (the pods' source check${f === 'inet' ? ", the probe port's guard" : ''}) is missing`);
  }

  /** Takes both tables away (kni leaving the node). */
  async removeTables(): Promise<void> {
    await nftApply(`table inet ${GUARD_TABLE} {}\ndelete table inet ${GUARD_TABLE}\ntable bridge ${GUARD_TABLE} {}\ndelete table bridge ${GUARD_TABLE}\n`, "kni's node guards");
    this.peers.clear();
  }

  close(): void {
    this.sock?.close();
    this.sock = undefined;
  }
}
