// IPAM across the node's pod ranges: one address per range per sandbox, all or nothing.
import { Cidr, cidrContains, Family, formatIp, parseIp } from './ip';
import { RangeAllocator } from './range-allocator';
import { KniError } from '../core/errors';

export interface AllocatedAddress {
  family: Family;
  address: string;
  prefixLength: number;
  gateway: string;
  range: string;
}

export interface RangeStatus {
  cidr: string;
  family: Family;
  size: bigint;
  used: number;
  free: bigint;
  exhausted: boolean;
}

export class Ipam {
  readonly ranges: RangeAllocator[];

  constructor(cidrs: Cidr[]) {
    this.ranges = cidrs.map((c) => new RangeAllocator(c));
  }

  /** One address per range; `requested` (at most one per family) instead of the next free one. */
  allocate(owner: string, requested: { family: Family; value: bigint }[] = []): AllocatedAddress[] {
    for (const q of requested) {
      if (!this.ranges.some((r) => r.family === q.family)) throw new KniError('INVALID_ARGUMENT', `requested address ${formatIp(q.family, q.value)}: there is no IPv${q.family} pod range`);
    }
    const out: AllocatedAddress[] = [];
    try {
      for (const r of this.ranges) {
        const want = requested.find((q) => q.family === r.family);
        const v = want ? r.claim(want.value, owner) : r.allocate(owner);
        out.push({ family: r.family, address: r.format(v), prefixLength: r.cidr.prefixLength, gateway: r.gatewayText, range: r.cidr.text });
      }
    } catch (e) {
      this.release(owner, out);
      throw e;
    }
    return out;
  }

  /** Restores a sandbox's addresses from the state store; returns the ones that could not be. */
  restore(owner: string, addresses: AllocatedAddress[]): AllocatedAddress[] {
    return addresses.filter((a) => !this.ranges.find((r) => r.cidr.text === a.range)?.reserve(a.address, owner));
  }

  /** An address found in the kernel, described as allocate() would have (undefined: not ours). */
  describe(address: string): AllocatedAddress | undefined {
    const { family, value } = parseIp(address);
    const r = this.ranges.find((x) => cidrContains(x.cidr, family, value));
    return r && { family, address, prefixLength: r.cidr.prefixLength, gateway: r.gatewayText, range: r.cidr.text };
  }

  release(owner: string, addresses: AllocatedAddress[]): void {
    for (const a of addresses) this.ranges.find((r) => r.cidr.text === a.range)?.release(a.address, owner);
  }

  /** Range → the address handed out last in it. */
  lastGiven(): Record<string, string> {
    return Object.fromEntries(this.ranges.map((r) => [r.cidr.text, r.lastGiven]));
  }

  /** Each range goes on after the address given for it (ranges not named, or addresses not theirs, are left as they are). */
  resumeAfter(lastGiven: Record<string, string>): void {
    for (const r of this.ranges) if (typeof lastGiven[r.cidr.text] === 'string') r.resumeAfter(lastGiven[r.cidr.text]);
  }

  status(): RangeStatus[] {
    return this.ranges.map((r) => ({
      cidr: r.cidr.text,
      family: r.family,
      size: r.size,
      used: r.used,
      free: r.size - BigInt(r.used),
      exhausted: r.exhausted,
    }));
  }

  gateways(): { family: Family; address: bigint; prefixLength: number; text: string }[] {
    return this.ranges.map((r) => ({ family: r.family, address: r.gateway, prefixLength: r.cidr.prefixLength, text: formatIp(r.family, r.gateway) }));
  }
}
