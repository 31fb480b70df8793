// MultiNetworkPolicies (k8s.cni.cncf.io/v1beta1, the Network Plumbing WG's): a NetworkPolicy's
// spec for the secondary networks its annotation k8s.v1.cni.cncf.io/policy-for names, enforced
// on a pod's interfaces on those networks, with peers' addresses on them (network-status). One
// model per network, compiled as NetworkPolicies are (policy-model.ts); the kernel's side is
// multi-ruleset.ts. The CRD carries no schema kni could rely on, so each object's shape is
// checked here: one kni cannot read is left out and said, never half enforced.
import type * as K8s from '@kubernetes/client-node';
import { DNS_LABEL, DNS_SUBDOMAIN, NETWORK_STATUS_ANNOTATION } from '../networks/network-selection';
import { compilePolicies, PolicyModel, PolicyPod } from './policy-model';

export const MULTI_POLICY_GROUP = 'k8s.cni.cncf.io';
export const MULTI_POLICY_VERSION = 'v1beta1';
export const MULTI_POLICY_PLURAL = 'multi-networkpolicies';
export const POLICY_FOR_ANNOTATION = 'k8s.v1.cni.cncf.io/policy-for';

export interface MultiNetworkPolicy extends K8s.KubernetesObject {
  spec?: K8s.V1NetworkPolicySpec;
}

/** Per network ("namespace/name" of its NetworkAttachmentDefinition), the model of the policies for it; and what cannot be enforced ("ns/name: why"). */
export interface MultiModel {
  networks: Map<string, PolicyModel>;
  problems: string[];
}

/** The networks a policy-for annotation names, as "namespace/name" (a name alone is of the policy's namespace). */
export function policyFor(annotation: string | undefined, namespace: string): { networks: string[]; problem?: string } {
  if (annotation === undefined || !annotation.trim()) return { networks: [], problem: `no ${POLICY_FOR_ANNOTATION} annotation: it is for no network` };
  const networks: string[] = [];
  for (const item of annotation.split(',').map((x) => x.trim()).filter(Boolean)) {
    const parts = item.split('/');
    const [ns, name] = parts.length === 1 ? [namespace, parts[0]] : parts;
    if (parts.length > 2 || !DNS_LABEL.test(ns) || !DNS_SUBDOMAIN.test(name)) return { networks: [], problem: `${POLICY_FOR_ANNOTATION}: ${JSON.stringify(item)} is not a network's name or namespace/name` };
    networks.push(`${ns}/${name}`);
  }
  return { networks: [...new Set(networks)] };
}

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);
const isStringMap = (x: unknown): boolean => isObject(x) && Object.values(x).every((v) => typeof v === 'string');

function selectorShape(x: unknown, at: string): string {
  if (x === undefined) return '';
  if (!isObject(x)) return `${at} is not an object`;
  if (x.matchLabels !== undefined && !isStringMap(x.matchLabels)) return `${at}.matchLabels is not a map of strings`;
  if (x.matchExpressions === undefined) return '';
  if (!Array.isArray(x.matchExpressions)) return `${at}.matchExpressions is not a list`;
  const bad = x.matchExpressions.findIndex((e) => !isObject(e) || typeof e.key !== 'string' || typeof e.operator !== 'string' || (e.values !== undefined && (!Array.isArray(e.values) || e.values.some((v) => typeof v !== 'string'))));
  return bad >= 0 ? `${at}.matchExpressions[${bad}] needs a key, an operator and a list of string values` : '';
}

function peerShape(x: unknown, at: string): string {
  if (!isObject(x)) return `${at} is not an object`;
  if (x.ipBlock !== undefined) {
    const b = x.ipBlock;
    if (!isObject(b) || typeof b.cidr !== 'string') return `${at}.ipBlock needs a cidr`;
    if (b.except !== undefined && (!Array.isArray(b.except) || b.except.some((e) => typeof e !== 'string'))) return `${at}.ipBlock.except is not a list of CIDRs`;
  }
  return selectorShape(x.podSelector, `${at}.podSelector`) || selectorShape(x.namespaceSelector, `${at}.namespaceSelector`);
}

function portShape(x: unknown, at: string): string {
  if (!isObject(x)) return `${at} is not an object`;
  if (x.protocol !== undefined && typeof x.protocol !== 'string') return `${at}.protocol is not a string`;
  if (x.port !== undefined && !(typeof x.port === 'string' || Number.isInteger(x.port))) return `${at}.port is not a number or a name`;
  if (x.endPort !== undefined && !Number.isInteger(x.endPort)) return `${at}.endPort is not a number`;
  return '';
}

/** Why a MultiNetworkPolicy's spec cannot be read ('' when it can). */
export function specShape(spec: unknown): string {
  if (!isObject(spec)) return 'it has no spec';
  const s = selectorShape(spec.podSelector, 'spec.podSelector');
  if (s) return s;
  if (spec.policyTypes !== undefined && (!Array.isArray(spec.policyTypes) || spec.policyTypes.some((t) => t !== 'Ingress' && t !== 'Egress'))) return 'spec.policyTypes lists other than Ingress and Egress';
  for (const [d, peersKey] of [['ingress', 'from'], ['egress', 'to']] as const) {
    const rules = spec[d];
    if (rules === undefined) continue;
    if (!Array.isArray(rules)) return `spec.${d} is not a list`;
    for (const [i, r] of rules.entries()) {
      const at = `spec.${d}[${i}]`;
      if (!isObject(r)) return `${at} is not an object`;
      for (const [key, shape] of [[peersKey, peerShape], ['ports', portShape]] as const) {
        const list = r[key];
        if (list === undefined) continue;
        if (!Array.isArray(list)) return `${at}.${key} is not a list`;
        for (const [j, x] of list.entries()) {
          const why = shape(x, `${at}.${key}[${j}]`);
          if (why) return why;
        }
      }
    }
  }
  return '';
}

/** The MultiNetworkPolicies of a cluster, a model per network they are for. */
export function compileMultiPolicies(policies: MultiNetworkPolicy[], namespaceLabels: ReadonlyMap<string, Record<string, string>>): MultiModel {
  const byNetwork = new Map<string, K8s.V1NetworkPolicy[]>();
  const problems: string[] = [];
  for (const p of policies) {
    const namespace = p.metadata?.namespace ?? 'default';
    const name = `${namespace}/${p.metadata?.name ?? ''}`;
    const { networks, problem } = policyFor(p.metadata?.annotations?.[POLICY_FOR_ANNOTATION], namespace);
    const why = problem ?? (specShape(p.spec) || undefined);
    if (why) {
      problems.push(`${name}: ${why}`);
      continue;
    }
    for (const n of networks) byNetwork.set(n, [...(byNetwork.get(n) ?? []), { metadata: p.metadata, spec: p.spec }]);
  }
  const networks = new Map<string, PolicyModel>();
  [...byNetwork.keys()].sort().forEach((n, i) => {
    const model = compilePolicies(byNetwork.get(n)!, namespaceLabels, undefined, `m${i}p`);
    networks.set(n, model);
    for (const x of model.problems) if (!problems.includes(x)) problems.push(x);
  });
  return { networks, problems };
}

/** A pod's addresses on each secondary network, from its network-status ("namespace/name" → addresses). */
export function networkAddresses(pod: K8s.V1Pod): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const text = pod.metadata?.annotations?.[NETWORK_STATUS_ANNOTATION];
  if (!text || text.length > 65536) return out;
  let list: unknown;
  try {
    list = JSON.parse(text);
  } catch {
    return out;
  }
  if (!Array.isArray(list)) return out;
  for (const e of list) {
    if (!isObject(e) || typeof e.name !== 'string' || !e.name.includes('/') || !Array.isArray(e.ips)) continue;
    const ips = e.ips.filter((x): x is string => typeof x === 'string' && /^[0-9a-fA-F.:]+$/.test(x));
    out.set(e.name, [...(out.get(e.name) ?? []), ...ips]);
  }
  return out;
}

/** A pod as a peer on one network: its addresses there (undefined: it has none). */
export function onNetwork(pod: PolicyPod, addresses: ReadonlyMap<string, string[]>, network: string): PolicyPod | undefined {
  const ips = addresses.get(network);
  return ips?.length ? { ...pod, ips } : undefined;
}
