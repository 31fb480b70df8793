// ClusterNetworkPolicies (policy.networking.k8s.io/v1beta1, sigs.k8s.io/network-policy-api
// v0.3.0) compiled into the rules policy-model.ts chains: per policy its tier (Admin before the
// NetworkPolicies, Baseline after them), its priority (lower first), its subject, and its rules
// in order, each with an action (Accept, Deny, Pass) and peers and ports as NetworkPolicy rules
// have them. The object is read as JSON (no client type exists for it) and checked field by
// field: what kni cannot enforce as written is a problem, and that peer or port matches nothing.
import type * as K8s from '@kubernetes/client-node';
import { blockRanges, ClusterAction, CompiledClusterPolicy, CompiledClusterRule, PeerSelector, Protocol, PROTOCOLS, selectorProblem } from './policy-model';

export const CLUSTER_POLICY_GROUP = 'policy.networking.k8s.io';
export const CLUSTER_POLICY_VERSION = 'v1beta1';
export const CLUSTER_POLICY_PLURAL = 'clusternetworkpolicies';

interface Port {
  number?: number;
  range?: { start?: number; end?: number };
}

interface Peer {
  namespaces?: K8s.V1LabelSelector;
  pods?: { namespaceSelector?: K8s.V1LabelSelector; podSelector?: K8s.V1LabelSelector };
  nodes?: K8s.V1LabelSelector;
  networks?: string[];
  domainNames?: string[];
}

interface Rule {
  name?: string;
  action?: string;
  from?: Peer[];
  to?: Peer[];
  protocols?: { tcp?: { destinationPort?: Port }; udp?: { destinationPort?: Port }; sctp?: { destinationPort?: Port }; destinationNamedPort?: string }[];
}

/** A ClusterNetworkPolicy as the API serves it (only what kni reads). */
export interface ClusterNetworkPolicy extends K8s.KubernetesObject {
  spec?: { tier?: string; priority?: number; subject?: Peer; ingress?: Rule[]; egress?: Rule[] };
}

const ACTIONS = new Set<ClusterAction>(['Accept', 'Deny', 'Pass']);

/** The pods a subject or peer names (namespaces, or pods within namespaces); undefined with the problem said. */
function selectorOf(x: Peer, problems: string[], at: string): PeerSelector | undefined {
  const sel: PeerSelector | undefined = x.namespaces ? { namespace: '', namespaceSelector: x.namespaces } : x.pods ? { namespace: '', namespaceSelector: x.pods.namespaceSelector ?? {}, podSelector: x.pods.podSelector ?? {} } : undefined;
  if (!sel) return undefined;
  const why = selectorProblem(sel.namespaceSelector) || selectorProblem(sel.podSelector);
  if (why) return void problems.push(`${at}: ${why}`);
  return sel;
}

function compileRule(set: string, r: Rule, egress: boolean, problems: string[], at: string): CompiledClusterRule | undefined {
  if (!ACTIONS.has(r.action as ClusterAction)) return void problems.push(`${at}: action ${JSON.stringify(r.action)} is not Accept, Deny or Pass: the rule is left out`);
  const rule: CompiledClusterRule = { set, name: r.name ?? '', action: r.action as ClusterAction, anyPeer: false, selectors: [], blocks: { 4: [], 6: [] }, anyPort: !r.protocols?.length, ports: [], named: [] };
  for (const p of (egress ? r.to : r.from) ?? []) {
    const sel = selectorOf(p, problems, at);
    if (sel) rule.selectors.push(sel);
    for (const cidr of p.networks ?? []) {
      try {
        const { family, ranges } = blockRanges(cidr, []);
        rule.blocks[family].push(...ranges);
      } catch (e) {
        problems.push(`${at}: network ${JSON.stringify(cidr)}: ${(e as Error).message}`);
      }
    }
    if (p.nodes) problems.push(`${at}: nodes peers are not enforced by kni: they match nothing`);
    if (p.domainNames?.length) problems.push(`${at}: domainNames peers are not enforced by kni: they match nothing`);
  }
  for (const x of r.protocols ?? []) {
    if (x.destinationNamedPort) {
      for (const protocol of PROTOCOLS) rule.named.push({ name: x.destinationNamedPort, protocol });
      continue;
    }
    for (const [protocol, p] of [['TCP', x.tcp], ['UDP', x.udp], ['SCTP', x.sctp]] as [Protocol, { destinationPort?: Port } | undefined][]) {
      if (!p) continue;
      const d = p.destinationPort;
      if (!d) {
        rule.ports.push({ protocol, first: 0, last: 65535 });
        continue;
      }
      const [first, last] = d.range ? [d.range.start ?? 0, d.range.end ?? 0] : [d.number ?? 1, d.number ?? 65535];
      if (first < 1 || last > 65535 || last < first) problems.push(`${at}: port ${first}-${last} is not within 1-65535`);
      else rule.ports.push({ protocol, first, last });
    }
  }
  return rule;
}

/** The cluster's ClusterNetworkPolicies in the order they are judged within a tier (priority, then name), with what kni cannot enforce. */
export function compileClusterPolicies(objects: readonly ClusterNetworkPolicy[]): { policies: CompiledClusterPolicy[]; problems: string[] } {
  const problems: string[] = [];
  const policies: CompiledClusterPolicy[] = [];
  const sorted = [...objects].sort((a, b) => (a.spec?.priority ?? 0) - (b.spec?.priority ?? 0) || (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
  sorted.forEach((o, i) => {
    const name = o.metadata?.name ?? '';
    const spec = o.spec ?? {};
    const said: string[] = [];
    if (spec.tier !== 'Admin' && spec.tier !== 'Baseline') said.push(`tier ${JSON.stringify(spec.tier)} is not Admin or Baseline: the policy is left out`);
    if (!Number.isInteger(spec.priority) || spec.priority! < 0 || spec.priority! > 1000) said.push(`priority ${JSON.stringify(spec.priority)} is not 0-1000: the policy is left out`);
    const subject = spec.subject && selectorOf(spec.subject, said, 'subject');
    if (!subject && !said.length) said.push('the subject names no namespaces or pods: the policy is left out');
    if (!said.length && subject) {
      const rules = (list: Rule[] | undefined, egress: boolean) =>
        (list ?? []).map((r, j) => compileRule(`c${i}-${egress ? 'e' : 'i'}${j}`, r, egress, said, `${egress ? 'egress' : 'ingress'} rule ${r.name ? JSON.stringify(r.name) : j}`)).filter((r): r is CompiledClusterRule => !!r);
      policies.push({ name, tier: spec.tier as 'Admin' | 'Baseline', priority: spec.priority!, subject, ingress: rules(spec.ingress, false), egress: rules(spec.egress, true) });
    }
    problems.push(...said.map((x) => `${name}: ${x}`));
  });
  return { policies, problems };
}
