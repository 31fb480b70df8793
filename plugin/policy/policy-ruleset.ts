// The nftables text of network policy: one table, `inet kni-policy`, on the forward hook, which
// every packet between a pod and anything but its own node crosses (pod to pod on this node
// too, with routed host ends).
// - Two base chains, egress then ingress: a connection's packets after its first pass on
//   conntrack's word (replies, and what a policy change leaves allowed keeps flowing); a new
//   one is sent by its source address to the sending pod's egress chain and by its destination
//   address to the receiving pod's ingress chain, through verdict maps: one lookup whatever the
//   number of pods. A pod no policy isolates has no element, and passes.
// - A pod's chain holds the rules of the policies that select it (one lookup per rule: peer
//   addresses in a set per rule and selector, ports in an anonymous set): the Admin tier's
//   ClusterNetworkPolicies, the NetworkPolicies and their counted drop, the Baseline tier's.
// The whole table is written in one transaction (delete and make again: nothing in between is
// seen by a packet); a new pod's chains and elements are added in one too, inside its attach.
import { Family } from '../ipam/ip';
import { nftTables } from '../netlink/nftables';
import { Direction, familyOfIp, LocalPod, modelSets, nftString, peerElements, PodChain, podChains, PolicyModel, PolicyPod } from './policy-model';

export const POLICY_TABLE = 'kni-policy';
const T = `inet ${POLICY_TABLE}`;

/** Whether the kernel has the table now (one netlink dump). */
export const policyTableInKernel = (): boolean => nftTables().some((t) => t.family === 'inet' && t.name === POLICY_TABLE);

const MAPS: Record<Direction, Record<Family, string>> = { ingress: { 4: 'ingress4', 6: 'ingress6' }, egress: { 4: 'egress4', 6: 'egress6' } };
const chainOf = (end: string, d: Direction): string => `${d === 'ingress' ? 'in' : 'out'}-${end}`;

/** What one pod of this node brings to the table: its chains, their map elements, and its set elements as a peer. */
interface PodPart {
  /** Those jumped to before those that jump to them. */
  chains: PodChain[];
  /** Map name → `address : jump chain`. */
  verdicts: Map<string, string[]>;
  elements: Map<string, string[]>;
}

function podPart(model: PolicyModel, pod: LocalPod): PodPart {
  const part: PodPart = { chains: [], verdicts: new Map(), elements: peerElements(model, pod) };
  for (const d of ['ingress', 'egress'] as const) {
    const name = chainOf(pod.end, d);
    const chains = podChains(model, pod, d, name);
    if (!chains.length) continue;
    part.chains.push(...chains);
    for (const ip of pod.ips) {
      const map = MAPS[d][familyOfIp(ip)];
      part.verdicts.set(map, [...(part.verdicts.get(map) ?? []), `${ip} : jump ${name}`]);
    }
  }
  return part;
}

const list = (items: Iterable<string>): string => {
  const all = [...items];
  return all.length ? ` elements = { ${all.join(', ')} }` : '';
};

/** Egress first (the sender's policies), then ingress (the receiver's): one vmap lookup per family each. */
const BASE_CHAINS = ([['egress', 'saddr', 2], ['ingress', 'daddr', 1]] as const).flatMap(([d, field, before]) => [
  `  chain ${d} {`,
  `    type filter hook forward priority filter - ${before}; policy accept;`,
  '    ct state established,related accept',
  `    ip ${field} vmap @${MAPS[d][4]}`,
  `    ip6 ${field} vmap @${MAPS[d][6]}`,
  '  }',
]);

const emptyMaps = (): string[] => (['ingress', 'egress'] as const).flatMap((d) => ([4, 6] as const).map((f) => `  map ${MAPS[d][f]} { type ipv${f}_addr : verdict; }`));

/**
 * A pod of this node isolated both ways, for an attach before the cluster's policies could be
 * read (the API server away since kni started): nothing but the pod itself passes until the
 * first whole write puts its real policies in. `makeTable`: the table is not in the kernel yet.
 */
export function podIsolatedScript(pod: LocalPod, makeTable: boolean): string {
  const lines = makeTable ? [`table ${T} {`, ...emptyMaps(), ...BASE_CHAINS, '}'] : [];
  for (const d of ['ingress', 'egress'] as const) {
    const name = chainOf(pod.end, d);
    const field = d === 'ingress' ? 'saddr' : 'daddr';
    lines.push(`add chain ${T} ${name}`, `flush chain ${T} ${name}`);
    for (const f of [4, 6] as const) {
      const own = pod.ips.filter((ip) => familyOfIp(ip) === f);
      if (own.length) lines.push(`add rule ${T} ${name} ip${f === 6 ? '6' : ''} ${field} { ${own.join(', ')} } accept`);
    }
    lines.push(`add rule ${T} ${name} counter drop comment ${nftString(`${pod.namespace}/${pod.name}: isolated until kni has read the cluster's NetworkPolicies`)}`);
    for (const ip of pod.ips) lines.push(`add element ${T} ${MAPS[d][familyOfIp(ip)]} { ${ip} : jump ${name} }`);
  }
  return `${lines.join('\n')}\n`;
}

/** The whole table as the model, this node's pods and the cluster's other pods make it (one transaction). */
export function policyTableScript(model: PolicyModel, local: LocalPod[], others: PolicyPod[]): string {
  const elements = new Map<string, Set<string>>([...modelSets(model).keys()].map((s) => [s, new Set<string>()]));
  const verdicts = new Map<string, string[]>();
  const chains: string[] = [];
  const addElements = (m: Map<string, string[]>) => {
    for (const [set, es] of m) for (const e of es) elements.get(set)?.add(e);
  };
  for (const pod of local) {
    const part = podPart(model, pod);
    addElements(part.elements);
    for (const [map, vs] of part.verdicts) verdicts.set(map, [...(verdicts.get(map) ?? []), ...vs]);
    for (const c of part.chains) chains.push(`  chain ${c.name} {\n${c.rules.map((r) => `    ${r}\n`).join('')}  }`);
  }
  for (const pod of others) addElements(peerElements(model, pod));
  const sets = modelSets(model);
  const lines = [
    `table ${T} {}`,
    `delete table ${T}`,
    `table ${T} {`,
    ...[...sets].map(([name, type]) => `  set ${name} { type ${type};${list(elements.get(name) ?? [])} }`),
    ...chains,
    ...(['ingress', 'egress'] as const).flatMap((d) => ([4, 6] as const).map((f) => `  map ${MAPS[d][f]} { type ipv${f}_addr : verdict;${list(verdicts.get(MAPS[d][f]) ?? [])} }`)),
    ...BASE_CHAINS,
    '}',
    '',
  ];
  return lines.join('\n');
}

/** A pod of this node into the table as it stands (its attach): its chains first, then what jumps to them. */
export function podAddScript(model: PolicyModel, pod: LocalPod): string {
  const part = podPart(model, pod);
  const lines: string[] = [];
  for (const c of part.chains) lines.push(`add chain ${T} ${c.name}`, `flush chain ${T} ${c.name}`);
  for (const c of part.chains) for (const r of c.rules) lines.push(`add rule ${T} ${c.name} ${r}`);
  for (const [set, es] of part.elements) lines.push(`add element ${T} ${set} { ${es.join(', ')} }`);
  for (const [map, vs] of part.verdicts) lines.push(`add element ${T} ${map} { ${vs.join(', ')} }`);
  return lines.length ? `${lines.join('\n')}\n` : '';
}

/** A pod of this node out of the table (its detach): what jumps to its chains, its chains, its elements. */
export function podDeleteScript(model: PolicyModel, pod: LocalPod): string {
  const part = podPart(model, pod);
  const lines: string[] = [];
  for (const [map, vs] of part.verdicts) lines.push(`delete element ${T} ${map} { ${vs.map((v) => v.split(' : ')[0]).join(', ')} }`);
  for (const c of [...part.chains].reverse()) lines.push(`delete chain ${T} ${c.name}`);
  for (const [set, es] of part.elements) lines.push(`delete element ${T} ${set} { ${es.join(', ')} }`);
  return lines.length ? `${lines.join('\n')}\n` : '';
}

export const removePolicyTableScript = (): string => `table ${T} {}\ndelete table ${T}\n`;
