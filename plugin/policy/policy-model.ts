// NetworkPolicies (networking.k8s.io/v1) compiled into what the kernel judges by: for each rule,
// the peers it lets through (pod addresses by selector, CIDRs less their exceptions) and the
// ports (numbers, ranges, names resolved against the receiving pod's container ports); for each
// pod of this node, the rules of the policies that select it. Pure: the objects are read in
// plugin/kube/policy-watch.ts, the nftables text is made in policy-ruleset.ts.
//
// Semantics as the APIs define them: a pod is isolated in a direction once a NetworkPolicy of that
// type selects it, and then takes only what some rule of those policies allows; policies add up.
// ClusterNetworkPolicies (cluster-policies.ts) come around them: the Admin tier's rules first, in
// priority order, where the first that matches decides (Pass: on to the NetworkPolicies); the
// Baseline tier's after them, for a pod no NetworkPolicy isolates.
// Traffic between a pod and its own node is not judged here (it never crosses the forward hook).
import type * as K8s from '@kubernetes/client-node';
import { bitsOf, Family, formatIp, parseCidr, parseIp } from '../ipam/ip';
import { labelSelectorMatches } from '../kube/label-selectors';
import { DirectionVerdict, ingressPeers, NamedPort, Protocol, policyTypes, TracedPort } from '../kube/policy-verdict';

export type { DirectionVerdict, NamedPort, Protocol, TracedPort };

/** A pod as policy sees it: where it is in the API, its labels, its addresses, its named container ports. */
export interface PolicyPod {
  namespace: string;
  name: string;
  labels: Record<string, string>;
  ips: string[];
  ports: NamedPort[];
}

/** A pod of this node: with the host end kni wired for it (which names its chains). */
export interface LocalPod extends PolicyPod {
  end: string;
}

export interface PeerSelector {
  namespace: string;
  namespaceSelector?: K8s.V1LabelSelector;
  podSelector?: K8s.V1LabelSelector;
}

export interface PortRange {
  protocol: Protocol;
  first: number;
  last: number;
}

export interface CompiledRule {
  /** The rule's sets are named from this (`<set>-4`, `<set>-n6`). */
  set: string;
  /** No from / to: any peer. */
  anyPeer: boolean;
  selectors: PeerSelector[];
  /** ipBlocks less their exceptions, as nft ranges. */
  blocks: Record<Family, string[]>;
  /** No ports: any port of any protocol. */
  anyPort: boolean;
  ports: PortRange[];
  named: { name: string; protocol: Protocol }[];
}

export interface CompiledPolicy {
  /** "namespace/name". */
  name: string;
  namespace: string;
  podSelector?: K8s.V1LabelSelector;
  /** Absent: the policy does not isolate in that direction. */
  ingress?: CompiledRule[];
  egress?: CompiledRule[];
}

export type ClusterAction = 'Accept' | 'Deny' | 'Pass';
export type ClusterTier = 'Admin' | 'Baseline';

export interface CompiledClusterRule extends CompiledRule {
  name: string;
  action: ClusterAction;
}

export interface CompiledClusterPolicy {
  /** The ClusterNetworkPolicy's name (no namespace, so no "/": a NetworkPolicy's names always have one). */
  name: string;
  tier: ClusterTier;
  priority: number;
  subject: PeerSelector;
  ingress: CompiledClusterRule[];
  egress: CompiledClusterRule[];
}

export interface PolicyModel {
  policies: CompiledPolicy[];
  /** ClusterNetworkPolicies in the order they are judged. */
  cluster: CompiledClusterPolicy[];
  namespaceLabels: ReadonlyMap<string, Record<string, string>>;
  /**
   * What kni cannot enforce as written, per policy: "ns/name: why" for a NetworkPolicy (such a
   * rule allows nothing), "name: why" for a ClusterNetworkPolicy (such a peer matches nothing).
   */
  problems: string[];
}

export type Direction = 'ingress' | 'egress';

export const PROTOCOLS: Protocol[] = ['TCP', 'UDP', 'SCTP'];
const OPERATORS = new Set(['In', 'NotIn', 'Exists', 'DoesNotExist']);

/** Why a selector cannot be judged as written ('' when it can): an operator the API refuses. */
export function selectorProblem(sel: K8s.V1LabelSelector | undefined): string {
  const bad = (sel?.matchExpressions ?? []).find((e) => !OPERATORS.has(e.operator));
  return bad ? `label selector operator ${JSON.stringify(bad.operator)} is not In, NotIn, Exists or DoesNotExist` : '';
}

/** A CIDR less some CIDRs inside it, as nft ranges ("a-b", or the CIDR when nothing is taken out). */
export function blockRanges(cidr: string, except: string[]): { family: Family; ranges: string[] } {
  const outer = parseCidr(cidr);
  const bits = BigInt(bitsOf(outer.family));
  const size = (prefix: number) => 1n << (bits - BigInt(prefix));
  const holes = except
    .map(parseCidr)
    .filter((c) => c.family === outer.family)
    .map((c) => [c.base, c.base + size(c.prefixLength) - 1n] as const)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  if (!holes.length) return { family: outer.family, ranges: [outer.text] };
  const ranges: string[] = [];
  const range = (a: bigint, b: bigint) => ranges.push(a === b ? formatIp(outer.family, a) : `${formatIp(outer.family, a)}-${formatIp(outer.family, b)}`);
  let next = outer.base;
  const end = outer.base + size(outer.prefixLength) - 1n;
  for (const [a, b] of holes) {
    const lo = a < outer.base ? outer.base : a;
    const hi = b > end ? end : b;
    if (lo > hi) continue;
    if (lo > next) range(next, lo - 1n);
    if (hi + 1n > next) next = hi + 1n;
  }
  if (next <= end) range(next, end);
  return { family: outer.family, ranges };
}

function compileRule(set: string, namespace: string, peers: K8s.V1NetworkPolicyPeer[] | undefined, ports: K8s.V1NetworkPolicyPort[] | undefined, problems: string[]): CompiledRule {
  const rule: CompiledRule = { set, anyPeer: !peers?.length, selectors: [], blocks: { 4: [], 6: [] }, anyPort: !ports?.length, ports: [], named: [] };
  for (const p of peers ?? []) {
    if (p.ipBlock) {
      try {
        const { family, ranges } = blockRanges(p.ipBlock.cidr, p.ipBlock.except ?? []);
        rule.blocks[family].push(...ranges);
      } catch (e) {
        problems.push(`ipBlock ${JSON.stringify(p.ipBlock.cidr)}: ${(e as Error).message}`);
      }
      continue;
    }
    if (!p.podSelector && !p.namespaceSelector) continue; // the API refuses such a peer
    const why = selectorProblem(p.podSelector) || selectorProblem(p.namespaceSelector);
    if (why) {
      problems.push(why);
      continue;
    }
    rule.selectors.push({ namespace, namespaceSelector: p.namespaceSelector, podSelector: p.podSelector });
  }
  for (const x of ports ?? []) {
    const protocol = (x.protocol ?? 'TCP').toUpperCase() as Protocol;
    if (!PROTOCOLS.includes(protocol)) {
      problems.push(`protocol ${JSON.stringify(x.protocol)} is not TCP, UDP or SCTP`);
      continue;
    }
    if (x.port === undefined || x.port === null) rule.ports.push({ protocol, first: 0, last: 65535 });
    else if (typeof x.port === 'string' && !/^\d+$/.test(x.port)) rule.named.push({ name: x.port, protocol });
    else {
      const first = Number(x.port);
      const last = x.endPort ?? first;
      if (first < 1 || first > 65535 || last < first || last > 65535) problems.push(`port ${first}${x.endPort !== undefined ? `-${x.endPort}` : ''} is not within 1-65535`);
      else rule.ports.push({ protocol, first, last });
    }
  }
  return rule;
}

/**
 * The model of a cluster's NetworkPolicies and compiled ClusterNetworkPolicies, with its
 * namespaces' labels (for namespace selectors). `setPrefix` starts the names of the rules' sets.
 */
export function compilePolicies(policies: K8s.V1NetworkPolicy[], namespaceLabels: ReadonlyMap<string, Record<string, string>>, cluster: { policies: CompiledClusterPolicy[]; problems: string[] } = { policies: [], problems: [] }, setPrefix = 'p'): PolicyModel {
  const out: PolicyModel = { policies: [], cluster: cluster.policies, namespaceLabels, problems: [...cluster.problems] };
  const sorted = [...policies].sort((a, b) => nameOf(a).localeCompare(nameOf(b)));
  sorted.forEach((p, i) => {
    const namespace = p.metadata?.namespace ?? 'default';
    const name = nameOf(p);
    const problems: string[] = [];
    const why = selectorProblem(p.spec?.podSelector);
    if (why) problems.push(`podSelector: ${why}`);
    const types = policyTypes(p);
    const c: CompiledPolicy = { name, namespace, podSelector: p.spec?.podSelector ?? {} };
    // A podSelector kni cannot judge: the policy selects nothing (said in problems).
    if (!why) {
      if (types.includes('ingress')) c.ingress = (p.spec?.ingress ?? []).map((r, j) => compileRule(`${setPrefix}${i}-i${j}`, namespace, ingressPeers(r), r.ports, problems));
      if (types.includes('egress')) c.egress = (p.spec?.egress ?? []).map((r, j) => compileRule(`${setPrefix}${i}-e${j}`, namespace, r.to, r.ports, problems));
    }
    out.problems.push(...problems.map((x) => `${name}: ${x}`));
    out.policies.push(c);
  });
  return out;
}

const nameOf = (p: K8s.V1NetworkPolicy): string => `${p.metadata?.namespace ?? 'default'}/${p.metadata?.name ?? ''}`;

export const selects = (p: CompiledPolicy, pod: PolicyPod): boolean => p.namespace === pod.namespace && labelSelectorMatches(p.podSelector, pod.labels);

function selectorMatches(model: PolicyModel, s: PeerSelector, pod: PolicyPod): boolean {
  const namespaceOk = s.namespaceSelector ? labelSelectorMatches(s.namespaceSelector, model.namespaceLabels.get(pod.namespace) ?? {}) : pod.namespace === s.namespace;
  return namespaceOk && labelSelectorMatches(s.podSelector, pod.labels);
}

/** Whether a ClusterNetworkPolicy's subject takes a pod. */
export const clusterSelects = (model: PolicyModel, p: CompiledClusterPolicy, pod: PolicyPod): boolean => selectorMatches(model, p.subject, pod);

/** Every rule of the model, NetworkPolicies' and ClusterNetworkPolicies', with its direction. */
function* rulesOf(model: PolicyModel): Generator<{ rule: CompiledRule; egress: boolean }> {
  for (const p of [...model.policies, ...model.cluster]) {
    for (const rule of p.ingress ?? []) yield { rule, egress: false };
    for (const rule of p.egress ?? []) yield { rule, egress: true };
  }
}

export const familyOfIp = (ip: string): Family => (ip.includes(':') ? 6 : 4);

const PROTO_NAME: Record<Protocol, string> = { TCP: 'tcp', UDP: 'udp', SCTP: 'sctp' };

type RuleEntry = { rule: CompiledRule; egress: boolean };

/**
 * The rules that may take a pod as a peer, found by one of its labels: each rule under the first
 * matchLabels pair of each of its selectors (a pod without that label cannot match it), the rest
 * (selectors without matchLabels, egress named ports to any peer) in `always`. A table write
 * judges every pod of the cluster against the rules: with 1,000 policies and 1,000 pods, testing
 * every pair took 300 ms of each write.
 */
interface PeerIndex {
  byLabel: Map<string, RuleEntry[]>;
  always: RuleEntry[];
}
const peerIndexes = new WeakMap<PolicyModel, PeerIndex>();

function peerIndex(model: PolicyModel): PeerIndex {
  const known = peerIndexes.get(model);
  if (known) return known;
  const index: PeerIndex = { byLabel: new Map(), always: [] };
  for (const e of rulesOf(model)) {
    const r = e.rule;
    if (e.egress && r.named.length && r.anyPeer) {
      index.always.push(e);
      continue;
    }
    if (!r.selectors.length) continue;
    const anchors = r.selectors.map((sel) => {
      const first = Object.entries(sel.podSelector?.matchLabels ?? {})[0];
      return first ? `${first[0]}=${first[1]}` : undefined;
    });
    if (anchors.includes(undefined)) {
      index.always.push(e);
      continue;
    }
    for (const a of new Set(anchors as string[])) {
      const l = index.byLabel.get(a);
      if (l) l.push(e);
      else index.byLabel.set(a, [e]);
    }
  }
  peerIndexes.set(model, index);
  return index;
}

/**
 * The set elements a pod brings as a peer: its addresses in the sets of the rules whose
 * selectors take it, and (egress rules naming ports) `address . protocol . port` for each named
 * port it has. Set name → elements.
 */
export function peerElements(model: PolicyModel, pod: PolicyPod): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const add = (set: string, e: string) => {
    const l = out.get(set);
    if (l) l.push(e);
    else out.set(set, [e]);
  };
  const index = peerIndex(model);
  const candidates = new Set(index.always);
  for (const [k, v] of Object.entries(pod.labels)) for (const e of index.byLabel.get(`${k}=${v}`) ?? []) candidates.add(e);
  for (const { rule: r, egress } of candidates) {
    const taken = r.selectors.some((s) => selectorMatches(model, s, pod));
    if (taken) for (const ip of pod.ips) add(`${r.set}-${familyOfIp(ip)}`, ip);
    if (egress && r.named.length && (taken || r.anyPeer)) {
      for (const n of r.named) {
        for (const port of pod.ports.filter((x) => x.name === n.name && x.protocol === n.protocol)) {
          for (const ip of pod.ips) add(`${r.set}-n${familyOfIp(ip)}`, `${ip} . ${PROTO_NAME[n.protocol]} . ${port.port}`);
        }
      }
    }
  }
  return out;
}

/** The sets a model's rules use, with the element type of each. */
export function modelSets(model: PolicyModel): Map<string, string> {
  const out = new Map<string, string>();
  for (const { rule: r, egress } of rulesOf(model)) {
    if (r.selectors.length) {
      out.set(`${r.set}-4`, 'ipv4_addr');
      out.set(`${r.set}-6`, 'ipv6_addr');
    }
    if (egress && r.named.length) {
      out.set(`${r.set}-n4`, 'ipv4_addr . inet_proto . inet_service');
      out.set(`${r.set}-n6`, 'ipv6_addr . inet_proto . inet_service');
    }
  }
  return out;
}

/** The nft rules (each ending in `verdict`) by which one rule matches a packet of `pod` in a direction. */
function ruleLines(r: CompiledRule, direction: Direction, pod: LocalPod, verdict = 'accept'): string[] {
  const peerField = direction === 'ingress' ? 'saddr' : 'daddr';
  const peers: string[] = [];
  if (r.anyPeer) peers.push('');
  else {
    if (r.selectors.length) peers.push(`ip ${peerField} @${r.set}-4 `, `ip6 ${peerField} @${r.set}-6 `);
    if (r.blocks[4].length) peers.push(`ip ${peerField} { ${r.blocks[4].join(', ')} } `);
    if (r.blocks[6].length) peers.push(`ip6 ${peerField} { ${r.blocks[6].join(', ')} } `);
  }
  const ports: PortRange[] = [...r.ports];
  // Named ports of ingress rules are the pod's own; those of egress rules are the peer's (a set, below).
  if (direction === 'ingress') {
    for (const n of r.named) for (const x of pod.ports.filter((y) => y.name === n.name && y.protocol === n.protocol)) ports.push({ protocol: n.protocol, first: x.port, last: x.port });
  }
  const lines: string[] = [];
  const portMatch = ports.length ? `meta l4proto . th dport { ${ports.map((x) => `${PROTO_NAME[x.protocol]} . ${x.first === x.last ? x.first : `${x.first}-${x.last}`}`).join(', ')} } ` : '';
  if (r.anyPort) for (const peer of peers) lines.push(`${peer}${verdict}`);
  else if (portMatch) for (const peer of peers) lines.push(`${peer}${portMatch}${verdict}`);
  if (direction === 'egress' && r.named.length) lines.push(`ip daddr . meta l4proto . th dport @${r.set}-n4 ${verdict}`, `ip6 daddr . meta l4proto . th dport @${r.set}-n6 ${verdict}`);
  return lines;
}

/** The policies that isolate a pod in a direction (empty: it is not isolated, everything passes). */
export const isolating = (model: PolicyModel, pod: PolicyPod, direction: Direction): CompiledPolicy[] => model.policies.filter((p) => p[direction] && selects(p, pod));

/** The rules of ClusterNetworkPolicies of a tier whose subject takes a pod, in the order they are judged. */
export const clusterRules = (model: PolicyModel, pod: PolicyPod, direction: Direction, tier: ClusterTier): { policy: CompiledClusterPolicy; rule: CompiledClusterRule }[] =>
  model.cluster.filter((p) => p.tier === tier && p[direction].length && clusterSelects(model, p, pod)).flatMap((policy) => policy[direction].map((rule) => ({ policy, rule })));

export interface PodChain {
  name: string;
  rules: string[];
}

/**
 * A pod's chains in a direction (none when no policy judges it there), those jumped to first:
 * the pod to itself (through a Service) passes; the Admin tier's rules, the first that matches
 * deciding (Pass goes to `<chain>-t`); then in `<chain>-t` when there is a Pass, what the
 * NetworkPolicies isolating the pod allow and a counted drop, or, when none isolates it, the
 * Baseline tier's rules. What reaches the end passes.
 */
export function podChains(model: PolicyModel, pod: LocalPod, direction: Direction, chain: string): PodChain[] {
  const policies = isolating(model, pod, direction);
  const admin = clusterRules(model, pod, direction, 'Admin');
  const baseline = policies.length ? [] : clusterRules(model, pod, direction, 'Baseline');
  if (!policies.length && !admin.length && !baseline.length) return [];
  const field = direction === 'ingress' ? 'saddr' : 'daddr';
  const own = (f: Family) => pod.ips.filter((ip) => familyOfIp(ip) === f);
  const head: string[] = [];
  if (own(4).length) head.push(`ip ${field} { ${own(4).join(', ')} } accept`);
  if (own(6).length) head.push(`ip6 ${field} { ${own(6).join(', ')} } accept`);
  const tailChain = `${chain}-t`;
  const hasPass = admin.some((x) => x.rule.action === 'Pass');
  const clusterLines = (list: typeof admin, pass: string) =>
    list.flatMap(({ policy, rule }) => ruleLines(rule, direction, pod, rule.action === 'Accept' ? 'accept' : rule.action === 'Deny' ? 'counter drop' : pass).map((l) => `${l} comment ${nftString(`${policy.name} (${policy.tier}) ${rule.name}`)}`));
  head.push(...clusterLines(admin, `goto ${tailChain}`));
  const tail: string[] = [];
  for (const p of policies) for (const r of p[direction]!) tail.push(...ruleLines(r, direction, pod).map((l) => `${l} comment ${nftString(p.name)}`));
  if (policies.length) tail.push(`counter drop comment ${nftString(`${pod.namespace}/${pod.name}: ${direction} isolated by ${policies.length} ${policies.length === 1 ? 'policy' : 'policies'}`)}`);
  // A Pass in the Baseline tier leaves the rest of it to the default: the packet passes.
  tail.push(...clusterLines(baseline, 'accept'));
  if (!hasPass) return [{ name: chain, rules: [...head, ...tail] }];
  return [{ name: tailChain, rules: tail }, { name: chain, rules: [...head, `goto ${tailChain}`] }];
}

/** A comment as nft takes it: quoted, with what it cannot hold taken out (object names hold none of it anyway). */
export const nftString = (s: string): string => `"${s.replace(/["\\\n]/g, '').slice(0, 120)}"`;

/** The other end of a judged packet: an address, and the pod holding it when it is one. */
export interface JudgedPeer {
  ip?: { family: Family; value: bigint };
  pod?: PolicyPod;
}

/** Whether an address is in nft ranges as the compiled rules hold them ("a-b", a CIDR, an address). */
function inRanges(ranges: string[], ip: { family: Family; value: bigint }): boolean {
  return ranges.some((r) => {
    if (r.includes('/')) {
      const c = parseCidr(r);
      return c.family === ip.family && ip.value >> BigInt(bitsOf(c.family) - c.prefixLength) === c.base >> BigInt(bitsOf(c.family) - c.prefixLength);
    }
    const [a, b = a] = r.split('-').map(parseIp);
    return a.family === ip.family && ip.value >= a.value && ip.value <= b.value;
  });
}

const portRangeText = (x: PortRange): string => (x.first === 0 && x.last === 65535 ? `every ${x.protocol} port` : `${x.first === x.last ? x.first : `${x.first}-${x.last}`}/${x.protocol}`);

/**
 * What the compiled rules (the ones the kernel gets) do with a packet between `pod` and `peer`
 * in a direction, on `port` when one is given: which policies isolate the pod there, which of
 * them let it through, and (without a port) on which ports. knictl trace words it.
 */
export function judge(model: PolicyModel, direction: Direction, pod: PolicyPod, peer: JudgedPeer, port?: TracedPort): DirectionVerdict {
  const out: DirectionVerdict = { selecting: [], allowedBy: [], ports: [] };
  // Named ports are the receiving pod's: the pod's own for ingress, the peer's for egress.
  const receiving = direction === 'ingress' ? pod.ports : (peer.pod?.ports ?? []);
  const peerOk = (r: CompiledRule) => r.anyPeer || (!!peer.pod && r.selectors.some((s) => selectorMatches(model, s, peer.pod!))) || (!!peer.ip && inRanges(r.blocks[peer.ip.family], peer.ip));
  const namedOf = (r: CompiledRule) => r.named.flatMap((n) => receiving.filter((x) => x.name === n.name && x.protocol === n.protocol).map((x) => ({ ...n, port: x.port })));
  const portOk = (r: CompiledRule, p: TracedPort) => r.anyPort || r.ports.some((x) => x.protocol === p.protocol && p.port >= x.first && p.port <= x.last) || namedOf(r).some((x) => x.protocol === p.protocol && x.port === p.port);
  // The first rule of a tier that matches decides; without a traced port, only a rule for every port can.
  const decide = (tier: ClusterTier): DirectionVerdict['decidedBy'] | 'Pass' | undefined => {
    for (const { policy, rule } of clusterRules(model, pod, direction, tier)) {
      if (!peerOk(rule) || !(port ? portOk(rule, port) : rule.anyPort)) continue;
      return rule.action === 'Pass' ? 'Pass' : { policy: policy.name, tier, rule: rule.name, action: rule.action };
    }
    return undefined;
  };
  const admin = decide('Admin');
  if (admin && admin !== 'Pass') return { ...out, ports: admin.action === 'Accept' ? 'all' : [], decidedBy: admin };
  const reachable = new Set<string>();
  let all = false;
  for (const p of isolating(model, pod, direction)) {
    out.selecting.push(p.name);
    let allows = false;
    for (const r of p[direction]!) {
      if (!peerOk(r)) continue;
      const named = namedOf(r);
      if (port) {
        if (portOk(r, port)) allows = true;
        continue;
      }
      if (r.anyPort) all = allows = true;
      for (const x of r.ports) reachable.add(portRangeText(x));
      for (const x of named) reachable.add(`${x.name} (${x.port}/${x.protocol})`);
      if (r.ports.length || named.length) allows = true;
    }
    if (allows) out.allowedBy.push(p.name);
  }
  out.ports = all ? 'all' : [...reachable];
  if (!out.selecting.length) {
    const baseline = decide('Baseline');
    if (baseline && baseline !== 'Pass') return { ...out, ports: baseline.action === 'Accept' ? 'all' : [], decidedBy: baseline };
  }
  return out;
}

const selectorText = (sel: K8s.V1LabelSelector | undefined): string => {
  const parts = [...Object.entries(sel?.matchLabels ?? {}).map(([k, v]) => `${k}=${v}`), ...(sel?.matchExpressions ?? []).map((e) => `${e.key} ${e.operator}${e.values?.length ? ` (${e.values.join(', ')})` : ''}`)];
  return parts.length ? parts.join(', ') : '';
};

/** One compiled rule in words: its peers and its ports, for `knictl policy`. */
export function ruleText(r: CompiledRule, direction: Direction, receivingPorts: NamedPort[]): string {
  const way = direction === 'ingress' ? 'from' : 'to';
  const peers: string[] = [];
  if (r.anyPeer) peers.push('anyone');
  for (const s of r.selectors) {
    const pods = selectorText(s.podSelector);
    const where = s.namespaceSelector ? (selectorText(s.namespaceSelector) ? `namespaces ${selectorText(s.namespaceSelector)}` : 'every namespace') : `namespace ${s.namespace}`;
    peers.push(`${pods ? `pods ${pods}` : 'every pod'} in ${where}`);
  }
  for (const f of [4, 6] as const) if (r.blocks[f].length) peers.push(r.blocks[f].join(', '));
  const ports = r.anyPort ? 'every port' : [...r.ports.map(portRangeText), ...r.named.map((n) => {
    const own = direction === 'ingress' ? receivingPorts.find((x) => x.name === n.name && x.protocol === n.protocol) : undefined;
    return direction === 'ingress' ? `${n.name} (${own ? `${own.port}/${n.protocol}` : 'not a port of this pod: nothing'})` : `${n.name}/${n.protocol} (each peer's port of that name)`;
  })].join(', ') || 'no port';
  return `${way} ${peers.join('; ') || 'nobody'} on ${ports}`;
}
