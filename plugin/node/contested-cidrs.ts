// Which Nodes' podCIDRs contest each other. Every peer's claim is checked against every other
// node's whenever the routes are planned again (a Node added, gone, or with new addresses or
// podCIDRs: often, as nodes join a large cluster), so the check must not be pairwise: at
// 1,000 nodes comparing each pair of claims took ≈ 0.3 s of the event loop a sync, at 3,000
// ≈ 2.2 s, with attaches waiting behind it. Two CIDRs overlap only when one holds the other,
// so each claim looks up, for each prefix length any claim of its family has, the one block of
// that length holding it: claims × prefix lengths in use (one or two in a cluster).
import { bitsOf, Cidr } from '../ipam/ip';

export interface Claim {
  node: string;
  cidr: Cidr;
}

/** The key of a claim in contestedClaims' answer. */
export const rivalKey = (node: string, cidr: Cidr): string => `${node}\n${cidr.text}`;

/**
 * For each claim that overlaps another node's, the first such claim in `claims`' order (as a
 * scan of the list would find it), keyed by `rivalKey`. Claims of one node never contest
 * each other.
 */
export function contestedClaims(claims: Claim[]): Map<string, Claim> {
  const index = new Map<string, number[]>();
  const lengths = new Map<number, Set<number>>();
  const blockKey = (family: number, length: number, base: bigint): string => `${family}/${length}/${base}`;
  claims.forEach((c, i) => {
    const k = blockKey(c.cidr.family, c.cidr.prefixLength, c.cidr.base);
    const at = index.get(k);
    if (at) at.push(i);
    else index.set(k, [i]);
    const l = lengths.get(c.cidr.family) ?? new Set<number>();
    l.add(c.cidr.prefixLength);
    lengths.set(c.cidr.family, l);
  });
  const first = new Map<string, number>();
  const note = (of: number, rival: number) => {
    const k = rivalKey(claims[of].node, claims[of].cidr);
    const had = first.get(k);
    if (had === undefined || rival < had) first.set(k, rival);
  };
  claims.forEach((c, i) => {
    const bits = bitsOf(c.cidr.family);
    for (const length of lengths.get(c.cidr.family)!) {
      if (length > c.cidr.prefixLength) continue;
      const shift = BigInt(bits - length);
      for (const j of index.get(blockKey(c.cidr.family, length, (c.cidr.base >> shift) << shift)) ?? []) {
        if (claims[j].node === c.node) continue;
        // claims[j] holds c (or is c's equal): each is the other's rival.
        note(i, j);
        note(j, i);
      }
    }
  });
  return new Map([...first].map(([k, j]) => [k, claims[j]]));
}
