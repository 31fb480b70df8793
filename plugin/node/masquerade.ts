// Masquerade for traffic leaving the cluster's pods, in kni's nftables table `inet
// kni-masquerade`: one rule per family, walked once per new connection whatever the number of
// nodes. A packet from this node's pod ranges (set pods4/pods6) to a destination outside set
// keep4/keep6 is masqueraded. The keep sets hold multicast (as the CNI plugins' ipMasq and
// flannel do) and IPv4's limited broadcast, every pod CIDR of the cluster (this node's and each
// peer's: pod → pod across nodes keeps the pod's source address) and the config's
// nonMasqueradeCIDRs. Multicast and broadcast because with br_netfilter (kube-proxy's nodes have
// it) a bridge's frames pass the postrouting hook too, and a pod's multicast or broadcast to the
// pods beside it would arrive from the gateway's address.
// The table is written whole at node setup (one `nft -f`: one transaction); a peer coming or
// going adds or deletes its elements only. Never per pod. Earlier kni versions masqueraded with
// an iptables chain (KNI-MASQ): removed where found at setup.
import type { Config } from '../core/config';
import { Cidr, cidrCovers, cidrsOverlap, cidrSize, Family, parseCidr, parseIp } from '../ipam/ip';
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

/** The keep sets' elements, per family. */
export type KeepSets = Record<Family, string[]>;

type KeepConfig = Pick<Config, 'ranges' | 'nonMasqueradeCIDRs' | 'nodeIpam'>;

/** Multicast, broadcast, nodeIpam's pools, nonMasqueradeCIDRs and this node's ranges, merged (a few). */
const fixedPart = (cfg: KeepConfig): Cidr[] => mergeCidrs([...NEVER_MASQUERADED[4], ...NEVER_MASQUERADED[6]].map(parseCidr).concat(cfg.nodeIpam.clusterCIDRs, cfg.nonMasqueradeCIDRs, cfg.ranges));

/** Whether a peer's block is an element of its own (outside the fixed part); undefined when it lies partly over it. */
function ownElement(fixed: Cidr[], c: Cidr): boolean | undefined {
  const over = fixed.filter((f) => cidrsOverlap(f, c));
  if (over.some((f) => cidrCovers(f, c))) return false;
  return over.length ? undefined : true;
}

/**
 * The keep sets' elements: the fixed part (an interval set takes no element inside another:
 * cidr-merge.ts), then each peer's block outside it as an element of its own. The peers' blocks
 * are disjoint (a contested one is not routed: contested-cidrs.ts), so a Node event changes its
 * blocks' elements only (keepSetDelta), never a merge of thousands; a peer's block partly over
 * the fixed part (a wide nonMasqueradeCIDR, say) makes it a merge of all.
 */
export function keepSets(cfg: KeepConfig, peerCidrs: Cidr[]): KeepSets {
  const fixed = fixedPart(cfg);
  const out: KeepSets = { 4: [], 6: [] };
  const peers: Cidr[] = [];
  for (const c of peerCidrs) {
    const own = ownElement(fixed, c);
    if (own === undefined) {
      for (const m of mergeCidrs([...fixed, ...peerCidrs])) out[m.family].push(m.text);
      return out;
    }
    if (own) peers.push(c);
  }
  const seen = new Set<string>();
  for (const c of [...fixed, ...peers]) {
    if (seen.has(c.text)) continue;
    seen.add(c.text);
    out[c.family].push(c.text);
  }
  return out;
}

/**
 * The nft script taking the keep sets from one list of peers' blocks to another, by the blocks
 * added and removed ('' when no element changes); undefined when one lies partly over the fixed
 * part (the table is then written whole).
 */
export function keepSetDelta(cfg: KeepConfig, added: Cidr[], removed: Cidr[]): string | undefined {
  const fixed = fixedPart(cfg);
  const lines: string[] = [];
  // Deleted first: a peer's block that changed hands is deleted and added in one transaction.
  for (const [verb, list] of [['delete', removed], ['add', added]] as const) {
    for (const f of [4, 6] as Family[]) {
      const mine: string[] = [];
      for (const c of list) {
        if (c.family !== f) continue;
        const own = ownElement(fixed, c);
        if (own === undefined) return undefined;
        if (own) mine.push(c.text);
      }
      if (mine.length) lines.push(`${verb} element inet ${MASQ_TABLE} ${SET.keep[f]} { ${[...new Set(mine)].join(', ')} }`);
    }
  }
  return lines.length ? `${lines.join('\n')}\n` : '';
}

const podsOf = (f: Family, ranges: Cidr[]): string[] => mergeCidrs(ranges.filter((c) => c.family === f)).map((c) => c.text);
const elements = (items: string[]): string => (items.length ? ` elements = { ${items.join(', ')} }` : '');

/** The nft script that makes the table exactly so. */
function masqueradeScript(ranges: Cidr[], keep: KeepSets): string {
  const sets = ([4, 6] as Family[]).flatMap((f) => [
    `  set ${SET.pods[f]} { type ${TYPE[f]}; flags interval;${elements(podsOf(f, ranges))} }`,
    `  set ${SET.keep[f]} { type ${TYPE[f]}; flags interval;${elements(keep[f])} }`,
  ]);
  return [
    `table inet ${MASQ_TABLE} {}`,
    `delete table inet ${MASQ_TABLE}`,
    `table inet ${MASQ_TABLE} {`,
    ...sets,
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    `    ip saddr @${SET.pods[4]} ip daddr != @${SET.keep[4]} counter masquerade comment "${COMMENT}"`,
    `    ip6 saddr @${SET.pods[6]} ip6 daddr != @${SET.keep[6]} counter masquerade comment "${COMMENT}"`,
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
 * not as the script expects (changed by hand, gone), it is written whole.
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

/**
 * What of syncMasquerade's table is missing or changed now (`nft flush ruleset`, a set's
 * elements deleted by hand): one listing of the table, reconcile's, never a pod's.
 */
export async function masqueradeDrift(ranges: Cidr[], keep: KeepSets): Promise<string[]> {
  const listing = (await nftTableJson('inet', MASQ_TABLE)) as { nftables?: Record<string, any>[] } | undefined;
  if (!listing?.nftables) return [`the masquerade table inet ${MASQ_TABLE} is missing`];
  const out: string[] = [];
  const items = listing.nftables;
  for (const f of [4, 6] as Family[]) {
    for (const [name, want] of [[SET.pods[f], podsOf(f, ranges)], [SET.keep[f], keep[f]]] as const) {
      const set = items.find((i) => i.set?.name === name)?.set;
      if (!set) out.push(`the masquerade set ${name} is missing`);
      else if (!sameAsListed(set.elem ?? [], want) && !sameIntervals(listedIntervals(set.elem ?? []), joined(want.map((t) => cidrInterval(parseCidr(t)))))) out.push(`the masquerade set ${name} was changed (${(set.elem ?? []).length} elements; kni wrote ${want.length})`);
    }
  }
  const rules = items.filter((i) => i.rule?.chain === 'postrouting' && i.rule.comment === COMMENT && JSON.stringify(i.rule.expr).includes('"masquerade"')).length;
  if (rules !== 2) out.push(`the masquerade chain postrouting holds ${rules} of kni's 2 rules`);
  return out;
}
