// kni's masquerade table (plugin/node/masquerade.ts) as a test reads it from a node netns: each
// set's elements as nft lists them (a /32 or /128 as its bare address), what it keeps from
// masquerading per family, and the chain's rules (without their counters).
import { execFileSync } from 'node:child_process';

export interface MasqueradeTable {
  sets: Record<string, string[]>;
  /** keep4/keep6's elements, then each peers' block set's elements as CIDRs (its name says their prefix length). */
  kept: Record<4 | 6, string[]>;
  rules: string[];
}

/** nft in `netns` (a path, or a name under /run/netns). */
const nftIn = (netns: string, ...args: string[]): string =>
  execFileSync('nsenter', [`--net=${netns.startsWith('/') ? netns : `/run/netns/${netns}`}`, 'nft', ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });

/** The table in `netns`, or undefined when there is none. */
export function masqueradeTable(netns: string): MasqueradeTable | undefined {
  const nft = (...args: string[]) => nftIn(netns, ...args);
  let listing: { nftables: Record<string, any>[] };
  try {
    listing = JSON.parse(nft('-j', 'list', 'table', 'inet', 'kni-masquerade'));
  } catch {
    return undefined;
  }
  const sets: Record<string, string[]> = {};
  for (const { set } of listing.nftables.filter((i) => i.set)) {
    sets[set.name] = (set.elem ?? []).map((e: any) => (typeof e === 'string' ? e : e.prefix ? `${e.prefix.addr}/${e.prefix.len}` : JSON.stringify(e)));
  }
  const kept: Record<4 | 6, string[]> = { 4: [...(sets.keep4 ?? [])], 6: [...(sets.keep6 ?? [])] };
  for (const [name, elems] of Object.entries(sets)) {
    const m = /^peers([46])_(\d+)$/.exec(name);
    if (m) kept[Number(m[1]) as 4 | 6].push(...elems.map((e) => `${e}/${m[2]}`));
  }
  const text = nft('list', 'chain', 'inet', 'kni-masquerade', 'postrouting');
  return { sets, kept, rules: text.split('\n').map((l) => l.trim().replace(/ counter packets \d+ bytes \d+/, '')).filter((l) => l.includes('masquerade comment')) };
}

/** The packets each family's masquerade rule has counted in `netns`: [IPv4, IPv6]. */
export function masqueradedPackets(netns: string): [number, number] {
  const text = nftIn(netns, 'list', 'chain', 'inet', 'kni-masquerade', 'postrouting');
  const count = (family: string) => Number(new RegExp(`^\\s*${family} saddr .* counter packets (\\d+)`, 'm').exec(text)?.[1] ?? -1);
  return [count('ip'), count('ip6')];
}
