// Masquerade for traffic leaving the cluster's pods, in kni's nftables table `inet
// kni-masquerade`: one rule per family, walked once per new connection whatever the number of
// nodes. A packet from this node's pod ranges (set pods4/pods6) to a destination outside the keep
// sets is masqueraded. The keep sets hold multicast (as the CNI plugins' ipMasq and flannel do)
// and IPv4's limited broadcast, every pod CIDR of the cluster (this node's and each peer's: pod →
// pod across nodes keeps the pod's source address) and the config's nonMasqueradeCIDRs.
// Multicast and broadcast because with br_netfilter (kube-proxy's nodes have it) a bridge's
// frames pass the postrouting hook too, and a pod's multicast or broadcast to the pods beside it
// would arrive from the gateway's address.
// The table is written whole at node setup (one `nft -f`: one transaction); a peer coming or
// going adds or deletes its elements only. Never per pod. Earlier kni versions masqueraded with
// an iptables chain (KNI-MASQ): removed where found at setup.
import type { Config } from '../core/config';
import { bitsOf, Cidr, cidrCovers, cidrSize, Family, formatIp, parseCidr, parseIp } from '../ipam/ip';
import { mergeCidrs } from '../ipam/cidr-merge';
import { chainRules, deleteChain, deleteRule, nftApply, nftTableJson } from './iptables';

const MASQ_TABLE = 'kni-masquerade';
const COMMENT = "kni: masquerade traffic leaving the cluster's pods";

/**
 * Where pod traffic keeps its source address: every pod CIDR of the cluster (this node's and
 * each peer's) and the destinations the config names (nonMasqueradeCIDRs). With nodeIpam the
 * cluster's pod CIDRs are known whole: they stand for the nodes' blocks inside them, so a pod on
 * a node whose block kni has not yet seen is reached with the pod's own address too, and the
 * set does not change as nodes come and go.
 */
export function unmasqueraded(cfg: Pick<Config, 'ranges' | 'nonMasqueradeCIDRs' | 'nodeIpam'>, peerCidrs: Cidr[]): Cidr[] {
  const pool = cfg.nodeIpam.clusterCIDRs;
  const outsidePool = [...cfg.ranges, ...peerCidrs].filter((c) => !pool.some((p) => cidrCovers(p, c)));
  return [...pool, ...mergeCidrs(outsidePool), ...cfg.nonMasqueradeCIDRs];
}

const NEVER_MASQUERADED: Record<Family, string[]> = { 4: ['224.0.0.0/4', '255.255.255.255/32'], 6: ['ff00::/8'] };
const SET = { pods: { 4: 'pods4', 6: 'pods6' }, keep: { 4: 'keep4', 6: 'keep6' } } as const;
const TYPE: Record<Family, string> = { 4: 'ipv4_addr', 6: 'ipv6_addr' };
const DADDR: Record<Family, string> = { 4: 'ip daddr', 6: 'ip6 daddr' };
/** The plain set of the peers' blocks of one family and prefix length. */
const blockSet = (f: Family, len: number): string => `peers${f}_${len}`;
const BLOCK_SET = /^peers([46])_(\d+)$/;
/** The address `ip daddr & <mask>` keeps of a destination to look it up among blocks of `len` bits. */
const maskOf = (f: Family, len: number): string => formatIp(f, ((1n << BigInt(len)) - 1n) << BigInt(bitsOf(f) - len));
const networkAddress = (c: Cidr): string => c.text.slice(0, c.text.indexOf('/'));

/**
 * The keep sets' elements, per family: an interval set (keep4/keep6) of the fixed part, and the
 * peers' blocks outside it as network addresses in a plain set per prefix length (peers4_24,
 * peers6_64: usually one per family). Not one interval set of all: libnftables (1.0.6, Debian
 * 12's) reads every interval set's elements in the netns before each script that adds elements,
 * as each Node event's delta here and the policy in each pod's attach do. Beside 5,000
 * intervals an admit took 9.2 ms instead of 0.24 (beside 5,000 plain elements, 0.26 ms), and
 * kni's CPU while 4,000 Nodes joined went from 21 to 10 s with plain sets (bench:scale).
 */
export interface KeepSets {
  fixed: Record<Family, string[]>;
  blocks: Record<Family, Map<number, string[]>>;
}

type KeepConfig = Pick<Config, 'ranges' | 'nonMasqueradeCIDRs' | 'nodeIpam'>;

/** Multicast, broadcast, nodeIpam's pools, nonMasqueradeCIDRs and this node's ranges, merged (a few). */
const fixedPart = (cfg: KeepConfig): Cidr[] => mergeCidrs([...NEVER_MASQUERADED[4], ...NEVER_MASQUERADED[6]].map(parseCidr).concat(cfg.nodeIpam.clusterCIDRs, cfg.nonMasqueradeCIDRs, cfg.ranges));
const covered = (fixed: Cidr[], c: Cidr): boolean => fixed.some((f) => cidrCovers(f, c));

/**
 * The keep sets: the fixed part, then each peer's block it does not cover. A block partly over
 * the fixed part is an element all the same: the rule keeps what either holds. A Node event
 * changes its blocks' elements only (keepSetDelta).
 */
export function keepSets(cfg: KeepConfig, peerCidrs: Cidr[]): KeepSets {
  const fixed = fixedPart(cfg);
  const out: KeepSets = { fixed: { 4: [], 6: [] }, blocks: { 4: new Map(), 6: new Map() } };
  for (const c of fixed) out.fixed[c.family].push(c.text);
  const seen = new Set<string>();
  for (const c of peerCidrs) {
    if (seen.has(c.text) || covered(fixed, c)) continue;
    seen.add(c.text);
    const sets = out.blocks[c.family];
    const list = sets.get(c.prefixLength);
    if (list) list.push(networkAddress(c));
    else sets.set(c.prefixLength, [networkAddress(c)]);
  }
  return out;
}

/**
 * The nft script taking the keep sets from one list of peers' blocks to another, by the blocks
 * added and removed ('' when no element changes). A block of a prefix length no set holds yet
 * fails the script (no such set), and updateMasquerade then writes the table whole.
 */
export function keepSetDelta(cfg: KeepConfig, added: Cidr[], removed: Cidr[]): string {
  const fixed = fixedPart(cfg);
  const lines: string[] = [];
  // Deleted first: a peer's block that changed hands is deleted and added in one transaction.
  for (const [verb, list] of [['delete', removed], ['add', added]] as const) {
    const bySet = new Map<string, Set<string>>();
    for (const c of list) {
      if (covered(fixed, c)) continue;
      const name = blockSet(c.family, c.prefixLength);
      const elems = bySet.get(name) ?? bySet.set(name, new Set()).get(name)!;
      elems.add(networkAddress(c));
    }
    for (const [name, elems] of bySet) lines.push(`${verb} element inet ${MASQ_TABLE} ${name} { ${[...elems].join(', ')} }`);
  }
  return lines.length ? `${lines.join('\n')}\n` : '';
}

const podsOf = (f: Family, ranges: Cidr[]): string[] => mergeCidrs(ranges.filter((c) => c.family === f)).map((c) => c.text);
const elements = (items: string[]): string => (items.length ? ` elements = { ${items.join(', ')} }` : '');
const lengthsOf = (keep: KeepSets, f: Family): number[] => [...keep.blocks[f].keys()].sort((a, b) => a - b);

/** The nft script that makes the table exactly so: one rule per family, one lookup per set. */
function masqueradeScript(ranges: Cidr[], keep: KeepSets): string {
  const sets = ([4, 6] as Family[]).flatMap((f) => [
    `  set ${SET.pods[f]} { type ${TYPE[f]}; flags interval;${elements(podsOf(f, ranges))} }`,
    `  set ${SET.keep[f]} { type ${TYPE[f]}; flags interval;${elements(keep.fixed[f])} }`,
    ...lengthsOf(keep, f).map((len) => `  set ${blockSet(f, len)} { type ${TYPE[f]};${elements(keep.blocks[f].get(len)!)} }`),
  ]);
  const rule = (f: Family) =>
    [`${f === 4 ? 'ip' : 'ip6'} saddr @${SET.pods[f]} ${DADDR[f]} != @${SET.keep[f]}`, ...lengthsOf(keep, f).map((len) => `${DADDR[f]} & ${maskOf(f, len)} != @${blockSet(f, len)}`), `counter masquerade comment "${COMMENT}"`].join(' ');
  return [
    `table inet ${MASQ_TABLE} {}`,
    `delete table inet ${MASQ_TABLE}`,
    `table inet ${MASQ_TABLE} {`,
    ...sets,
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    `    ${rule(4)}`,
    `    ${rule(6)}`,
    '  }',
    '}',
    '',
  ].join('\n');
}

/** Masquerades what leaves `ranges` (this node's pod ranges) for any destination outside the keep sets: the table written whole. */
export async function syncMasquerade(ranges: Cidr[], keep: KeepSets): Promise<void> {
  await nftApply(masqueradeScript(ranges, keep), `the masquerade table ${MASQ_TABLE}`);
  await removeIptablesMasquerade(ranges);
}

/**
 * The keep sets changed by element (keepSetDelta's script), in one transaction; when the table is
 * not as the script expects (changed by hand, gone, no set yet for a block's prefix length), it
 * is written whole.
 */
export async function updateMasquerade(ranges: Cidr[], script: string, whole: () => KeepSets): Promise<void> {
  if (!script) return;
  try {
    await nftApply(script, `the masquerade table ${MASQ_TABLE}'s elements`);
  } catch {
    await nftApply(masqueradeScript(ranges, whole()), `the masquerade table ${MASQ_TABLE}`);
  }
}

/** The table away (masquerade turned off, the ranges changed, kni leaving the node). */
export async function removeMasquerade(ranges: Cidr[]): Promise<void> {
  await nftApply(`table inet ${MASQ_TABLE} {}\ndelete table inet ${MASQ_TABLE}\n`, `the masquerade table ${MASQ_TABLE}`);
  await removeIptablesMasquerade(ranges);
}

/** Earlier kni versions' iptables chain and the POSTROUTING rules jumping to it, where found. */
async function removeIptablesMasquerade(ranges: Cidr[]): Promise<void> {
  const OLD_CHAIN = 'KNI-MASQ';
  for (const f of new Set(ranges.map((c) => c.family))) {
    if ((await chainRules(f, 'nat', OLD_CHAIN)) === undefined) continue;
    for (const c of ranges.filter((r) => r.family === f)) {
      await deleteRule(f, 'nat', 'POSTROUTING', ['-s', c.text, '-m', 'comment', '--comment', COMMENT, '-j', OLD_CHAIN]);
    }
    await deleteChain(f, 'nat', OLD_CHAIN);
  }
}

/** Address intervals [first, last], to compare what nft lists with what kni wrote whatever way nft prints them. */
type Interval = [bigint, bigint];
const cidrInterval = (c: Cidr): Interval => [c.base, c.base + cidrSize(c) - 1n];
function joined(out: Interval[]): Interval[] {
  out.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const all: Interval[] = [];
  for (const i of out) {
    const last = all[all.length - 1];
    if (last && i[0] <= last[1] + 1n) last[1] = i[1] > last[1] ? i[1] : last[1];
    else all.push([...i]);
  }
  return all;
}
function listedIntervals(items: unknown[]): Interval[] {
  const out: Interval[] = [];
  for (const e of items) {
    const v = (e as { elem?: { val?: unknown } })?.elem?.val ?? e;
    if (typeof v === 'string') {
      const ip = parseIp(v).value;
      out.push([ip, ip]);
    } else if (v && typeof v === 'object' && 'prefix' in v) {
      const p = (v as { prefix: { addr: string; len: number } }).prefix;
      out.push(cidrInterval(parseCidr(`${p.addr}/${p.len}`)));
    } else if (v && typeof v === 'object' && 'range' in v) {
      const [a, b] = (v as { range: [string, string] }).range;
      out.push([parseIp(a).value, parseIp(b).value]);
    }
  }
  return joined(out);
}
/**
 * The elements nft lists are the ones kni wrote, text for text (a /32 or /128 listed as its bare
 * address): the common case, without parsing thousands of addresses in reconcile's turn.
 */
function sameAsListed(items: unknown[], want: string[]): boolean {
  if (items.length !== want.length) return false;
  const listed = new Set<string>();
  for (const e of items) {
    if (typeof e === 'string') listed.add(e);
    else if (e && typeof e === 'object' && 'prefix' in e) {
      const p = (e as { prefix: { addr: string; len: number } }).prefix;
      listed.add(`${p.addr}/${p.len}`);
    } else return false;
  }
  return want.every((t) => listed.has(t) || listed.has(t.replace(/\/(32|128)$/, '')));
}
const sameIntervals = (a: Interval[], b: Interval[]): boolean => a.length === b.length && a.every((x, i) => x[0] === b[i][0] && x[1] === b[i][1]);

/** Whether a set lists what kni wrote (CIDRs), text for text or else address for address. */
const sameElements = (listed: unknown[], want: string[]): boolean => sameAsListed(listed, want) || sameIntervals(listedIntervals(listed), joined(want.map((t) => cidrInterval(parseCidr(t)))));

/**
 * What of syncMasquerade's table is missing or changed now (`nft flush ruleset`, a set's
 * elements deleted by hand, a rule that no longer looks a set up): one listing of the table,
 * reconcile's, never a pod's. A peers' set left empty by the blocks deleted from it is kni's
 * (it goes at the next whole write); any element in a set kni no longer fills is drift.
 */
export async function masqueradeDrift(ranges: Cidr[], keep: KeepSets): Promise<string[]> {
  const listing = (await nftTableJson('inet', MASQ_TABLE)) as { nftables?: Record<string, any>[] } | undefined;
  if (!listing?.nftables) return [`the masquerade table inet ${MASQ_TABLE} is missing`];
  const out: string[] = [];
  const items = listing.nftables;
  const sets = new Map<string, unknown[]>(items.filter((i) => i.set).map((i) => [i.set.name, i.set.elem ?? []]));
  const rules = items.filter((i) => i.rule?.chain === 'postrouting' && i.rule.comment === COMMENT && JSON.stringify(i.rule.expr).includes('"masquerade"')).map((i) => JSON.stringify(i.rule.expr));
  for (const f of [4, 6] as Family[]) {
    for (const [name, want] of [[SET.pods[f], podsOf(f, ranges)], [SET.keep[f], keep.fixed[f]]] as const) {
      const elem = sets.get(name);
      if (!elem) out.push(`the masquerade set ${name} is missing`);
      else if (!sameElements(elem, want)) out.push(`the masquerade set ${name} was changed (${elem.length} elements; kni wrote ${want.length})`);
    }
    for (const len of lengthsOf(keep, f)) {
      const name = blockSet(f, len);
      const elem = sets.get(name);
      const want = keep.blocks[f].get(len)!;
      if (!elem) out.push(`the masquerade set ${name} is missing`);
      else if (!sameElements(elem, want.map((a) => `${a}/${bitsOf(f)}`))) out.push(`the masquerade set ${name} was changed (${elem.length} elements; kni wrote ${want.length})`);
      if (!rules.some((r) => r.includes(`"@${name}"`))) out.push(`no masquerade rule looks up the set ${name}`);
    }
  }
  for (const [name, elem] of sets) {
    const m = BLOCK_SET.exec(name);
    if (m && elem.length && !keep.blocks[Number(m[1]) as Family].has(Number(m[2]))) out.push(`the masquerade set ${name} holds ${elem.length} elements kni did not write`);
  }
  if (rules.length !== 2) out.push(`the masquerade chain postrouting holds ${rules.length} of kni's 2 rules`);
  return out;
}
