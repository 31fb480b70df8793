// Which Nodes' podCIDRs contest each other. A Node joining, leaving or changing its podCIDRs
// (often, as nodes join a large cluster) must not cost a pass over every peer's claims: at
// 1,000 nodes comparing each pair took ≈ 0.3 s of the event loop, at 3,000 ≈ 2.2 s, with
// attaches waiting behind it. Two CIDRs overlap only when one holds the other, so the claims
// are indexed by their block, and a CIDR looks up, for each prefix length any claim of its
// family has, the one block of that length holding it (and the blocks it holds): a lookup per
// prefix length in use (one or two in a cluster).
import { bitsOf, Cidr } from '../ipam/ip';

export interface Claim {
  node: string;
  cidr: Cidr;
}

/** The key of a claim in contestedClaims' answer. */
export const rivalKey = (node: string, cidr: Cidr): string => `${node}\n${cidr.text}`;

/** Sub-blocks a claim is looked up in before the claims of that length are scanned instead. */
const MAX_SUB_BLOCKS = 1024;

/**
 * The claims, indexed by their block: which overlap a CIDR is a lookup per prefix length in use,
 * so a Node joining or leaving costs lookups for its own claims, not a pass over every peer's.
 */
export class ClaimIndex {
  /** One claim per block as itself, an array only where claims share a block: no array kept per claim. */
  private readonly blocks = new Map<string, Claim | Claim[]>();
  /** Family → prefix length → how many claims have it. */
  private readonly lengths = new Map<number, Map<number, number>>();

  // Joined, not a template: a join makes one flat string, where a template's is a tree of pieces kept per claim.
  private static key(family: number, length: number, base: bigint): string {
    return [family, length, base].join('/');
  }

  private claimsAt(k: string): Claim[] {
    const at = this.blocks.get(k);
    return at === undefined ? [] : Array.isArray(at) ? at : [at];
  }

  add(c: Claim): void {
    const k = ClaimIndex.key(c.cidr.family, c.cidr.prefixLength, c.cidr.base);
    const at = this.blocks.get(k);
    if (at === undefined) this.blocks.set(k, c);
    else if (Array.isArray(at)) at.push(c);
    else this.blocks.set(k, [at, c]);
    const l = this.lengths.get(c.cidr.family) ?? new Map<number, number>();
    l.set(c.cidr.prefixLength, (l.get(c.cidr.prefixLength) ?? 0) + 1);
    this.lengths.set(c.cidr.family, l);
  }

  remove(c: Claim): void {
    const k = ClaimIndex.key(c.cidr.family, c.cidr.prefixLength, c.cidr.base);
    const at = this.claimsAt(k);
    const i = at.findIndex((o) => o.node === c.node && o.cidr.text === c.cidr.text);
    if (i < 0) return;
    at.splice(i, 1);
    if (!at.length) this.blocks.delete(k);
    else if (at.length === 1) this.blocks.set(k, at[0]);
    const l = this.lengths.get(c.cidr.family)!;
    const n = l.get(c.cidr.prefixLength)! - 1;
    if (n) l.set(c.cidr.prefixLength, n);
    else l.delete(c.cidr.prefixLength);
  }

  /** Every claim of another node than `node` overlapping `cidr`: holding it, equal to it, or inside it. */
  overlapping(node: string, cidr: Cidr): Claim[] {
    const out: Claim[] = [];
    const bits = bitsOf(cidr.family);
    const take = (k: string) => {
      for (const o of this.claimsAt(k)) if (o.node !== node) out.push(o);
    };
    for (const length of this.lengths.get(cidr.family)?.keys() ?? []) {
      if (length <= cidr.prefixLength) {
        const shift = BigInt(bits - length);
        take(ClaimIndex.key(cidr.family, length, (cidr.base >> shift) << shift));
        continue;
      }
      const subBlocks = 2 ** (length - cidr.prefixLength);
      if (subBlocks <= MAX_SUB_BLOCKS) {
        const step = 1n << BigInt(bits - length);
        for (let i = 0n; i < BigInt(subBlocks); i++) take(ClaimIndex.key(cidr.family, length, cidr.base + i * step));
      } else {
        // A wide claim (a bogus Node's): the claims of that length are fewer than its sub-blocks.
        const end = cidr.base + (1n << BigInt(bits - cidr.prefixLength));
        for (const claims of this.blocks.values()) {
          const o = Array.isArray(claims) ? claims[0] : claims;
          if (o.cidr.family === cidr.family && o.cidr.prefixLength === length && o.cidr.base >= cidr.base && o.cidr.base < end) take(ClaimIndex.key(o.cidr.family, length, o.cidr.base));
        }
      }
    }
    return out;
  }
}

/**
 * For each claim that overlaps another node's, the first such claim in `claims`' order (as a
 * scan of the list would find it), keyed by `rivalKey`. Claims of one node never contest
 * each other.
 */
export function contestedClaims(claims: Claim[]): Map<string, Claim> {
  const index = new ClaimIndex();
  const position = new Map<Claim, number>();
  claims.forEach((c, i) => {
    index.add(c);
    position.set(c, i);
  });
  const out = new Map<string, Claim>();
  for (const c of claims) {
    let first: Claim | undefined;
    for (const o of index.overlapping(c.node, c.cidr)) if (!first || position.get(o)! < position.get(first)!) first = o;
    if (first) out.set(rivalKey(c.node, c.cidr), first);
  }
  return out;
}
