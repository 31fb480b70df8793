// The fewest CIDRs covering exactly the addresses a list covers: those inside another are
// dropped and two halves of one block become the block, never a wider block than the list
// covers. An nftables interval set takes no element inside another: the masquerade keep sets'
// fixed part is merged so (masquerade.ts), and Trace's list of unmasqueraded destinations.
import { bitsOf, Cidr, Family, formatIp } from './ip';

const cidrOf = (family: Family, base: bigint, prefixLength: number): Cidr => ({ family, base, prefixLength, text: `${formatIp(family, base)}/${prefixLength}` });

export function mergeCidrs(cidrs: Cidr[]): Cidr[] {
  const out: Cidr[] = [];
  for (const family of [4, 6] as Family[]) {
    const bits = bitsOf(family);
    const sorted = cidrs.filter((c) => c.family === family).sort((a, b) => (a.base < b.base ? -1 : a.base > b.base ? 1 : a.prefixLength - b.prefixLength));
    const stack: Cidr[] = [];
    for (const c of sorted) {
      const top = stack[stack.length - 1];
      // Sorted by base, then wider first: a CIDR inside the last kept one starts within it.
      if (top && c.base < top.base + (1n << BigInt(bits - top.prefixLength))) continue;
      stack.push(c);
      // Two halves of one block, side by side, become the block (and maybe again one level up).
      for (;;) {
        const b = stack[stack.length - 1];
        const a = stack[stack.length - 2];
        if (!a || a.prefixLength !== b.prefixLength || a.prefixLength === 0) break;
        const size = 1n << BigInt(bits - a.prefixLength);
        if (a.base % (size * 2n) !== 0n || a.base + size !== b.base) break;
        stack.splice(-2, 2, cidrOf(family, a.base, a.prefixLength - 1));
      }
    }
    out.push(...stack);
  }
  return out;
}
