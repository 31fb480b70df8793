// One pod range: hands out addresses one at a time, the first after the gateway upwards,
// continuing after the last one given (like host-local) so a just-released address is not
// reused at once.
import { Cidr, cidrContains, cidrSize, Family, formatIp, formatNewIp, parseIp } from './ip';
import { KniError } from '../core/errors';

export class RangeAllocator {
  readonly gateway: bigint;
  /** The gateway as text: every allocation names it. */
  readonly gatewayText: string;
  private readonly first: bigint;
  private readonly last: bigint;
  private readonly owners = new Map<bigint, string>();
  private cursor: bigint;

  constructor(readonly cidr: Cidr) {
    this.gateway = cidr.base + 1n;
    this.gatewayText = formatIp(cidr.family, this.gateway);
    this.first = cidr.base + 2n;
    // IPv4 keeps its broadcast address out; IPv6 has none.
    this.last = cidr.base + cidrSize(cidr) - (cidr.family === 4 ? 2n : 1n);
    this.cursor = this.last;
  }

  get family(): Family {
    return this.cidr.family;
  }

  get size(): bigint {
    return this.last - this.first + 1n;
  }

  get used(): number {
    return this.owners.size;
  }

  get exhausted(): boolean {
    return BigInt(this.owners.size) >= this.size;
  }

  allocate(owner: string): bigint {
    if (this.exhausted) {
      throw new KniError('RESOURCE_EXHAUSTED', `pod range ${this.cidr.text} is exhausted: all ${this.size} addresses are in use`);
    }
    let v = this.cursor;
    for (;;) {
      v = v >= this.last ? this.first : v + 1n;
      if (!this.owners.has(v)) break;
    }
    this.owners.set(v, owner);
    this.cursor = v;
    return v;
  }

  /** The address handed out last (the next one comes after it). */
  get lastGiven(): string {
    return this.format(this.cursor);
  }

  /** Goes on after this address (one handed out before a restart); false: not of this range. */
  resumeAfter(address: string): boolean {
    let p: { family: Family; value: bigint };
    try {
      p = parseIp(address);
    } catch {
      return false;
    }
    if (p.family !== this.family || p.value < this.first || p.value > this.last) return false;
    this.cursor = p.value;
    return true;
  }

  /** Gives the owner exactly this address (a caller asked for it), or says why not. */
  claim(value: bigint, owner: string): bigint {
    const text = this.format(value);
    if (!cidrContains(this.cidr, this.family, value)) throw new KniError('INVALID_ARGUMENT', `requested address ${text} is outside pod range ${this.cidr.text}`);
    if (value < this.first || value > this.last) {
      throw new KniError('INVALID_ARGUMENT', `requested address ${text} is the ${value === this.gateway ? 'gateway' : value === this.cidr.base ? 'network address' : 'broadcast address'} of pod range ${this.cidr.text}`);
    }
    const current = this.owners.get(value);
    if (current !== undefined && current !== owner) throw new KniError('ALREADY_EXISTS', `requested address ${text} is in use by sandbox ${current}`);
    this.owners.set(value, owner);
    return value;
  }

  /** Marks an address as taken (restoring state); false if it belongs to someone else. */
  reserve(address: string, owner: string): boolean {
    const { family, value } = parseIp(address);
    if (!cidrContains(this.cidr, family, value) || value < this.first || value > this.last) return false;
    const current = this.owners.get(value);
    if (current !== undefined && current !== owner) return false;
    this.owners.set(value, owner);
    return true;
  }

  release(address: string, owner: string): void {
    const { value } = parseIp(address);
    if (this.owners.get(value) === owner) this.owners.delete(value);
  }

  ownerOf(address: string): string | undefined {
    return this.owners.get(parseIp(address).value);
  }

  format(v: bigint): string {
    return formatNewIp(this.cidr.family, v);
  }
}
