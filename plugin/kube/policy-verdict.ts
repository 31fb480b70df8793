// Whether the NetworkPolicies (networking.k8s.io/v1) of a pod let one peer through, as the API
// defines them, for Trace: kni enforces none, but where a policy agent runs "which policy drops
// this" is the usual last question. Pure: the objects are read elsewhere (network-policies.ts).
//
// A pod is isolated in a direction once a policy of that type selects it; it then takes only
// what at least one of those policies' rules allows: a rule allows a peer (any, when it lists
// none) on a port (any, when it lists none). Left to the caller, as the API leaves them to every
// implementation: traffic between a pod and its own node, and a pod to itself, always passes.
import type * as K8s from '@kubernetes/client-node';
import { cidrTextHolds, Family, parseIp } from '../ipam/ip';
import { labelSelectorMatches } from './label-selectors';

export type Protocol = 'TCP' | 'UDP' | 'SCTP';
export type Direction = 'ingress' | 'egress';

/** The port a traced packet is sent to (the destination pod's, after kube-proxy's rewrite). */
export interface TracedPort {
  port: number;
  protocol: Protocol;
}

/** A container port a policy may name (`port: http`). */
export interface NamedPort {
  name: string;
  port: number;
  protocol: Protocol;
}

/** The other end: a pod (its labels, its namespace's labels), or only an address (a node, outside the cluster). */
export interface PolicyPeer {
  ip?: { family: Family; value: bigint };
  pod?: { namespace: string; labels: Record<string, string>; namespaceLabels: Record<string, string> };
}

export interface DirectionVerdict {
  /** The policies ("ns/name") isolating the pod in that direction; none: everything passes. */
  selecting: string[];
  /** Those with a rule letting the peer through (on the port, when one is traced). */
  allowedBy: string[];
  /** Without a traced port: what the peer may reach ("80/TCP", "every UDP port"); 'all' when a rule lists no ports. */
  ports: 'all' | string[];
}

/** "80", "80/tcp", "53/UDP", "sctp"-less: a traced port as knictl and the Trace RPC take it; throws saying what is wrong. */
export function parseTracedPort(text: string): TracedPort {
  const m = /^(\d{1,5})(?:\/(tcp|udp|sctp))?$/i.exec(text.trim());
  const port = m ? Number(m[1]) : 0;
  if (!m || port < 1 || port > 65535) throw new Error(`port ${JSON.stringify(text)}: want a port 1-65535, optionally /TCP, /UDP or /SCTP (80, 53/udp)`);
  return { port, protocol: (m[2]?.toUpperCase() ?? 'TCP') as Protocol };
}

export const portText = (p: TracedPort): string => `${p.port}/${p.protocol}`;

/** Whether a policy isolates its pods in a direction: policyTypes, or as the API defaults it (Ingress; Egress too with egress rules). */
export function policyTypes(p: K8s.V1NetworkPolicy): Direction[] {
  const types = p.spec?.policyTypes ?? ['Ingress', ...(p.spec?.egress ? ['Egress'] : [])];
  return types.map((t) => t.toLowerCase()).filter((t): t is Direction => t === 'ingress' || t === 'egress');
}

/**
 * The verdict of `policies` (those of the pod's namespace) on what passes between the pod (its
 * labels) and `peer` in `direction`. `destinationPorts`: the container ports of the pod
 * receiving it (the pod itself for ingress, the peer for egress), which named ports resolve to.
 */
export function policyVerdict(policies: K8s.V1NetworkPolicy[], direction: Direction, podLabels: Record<string, string>, peer: PolicyPeer, destinationPorts: NamedPort[], port?: TracedPort): DirectionVerdict {
  const out: DirectionVerdict = { selecting: [], allowedBy: [], ports: [] };
  const reachable = new Set<string>();
  let all = false;
  for (const p of policies) {
    if (!policyTypes(p).includes(direction) || !labelSelectorMatches(p.spec?.podSelector, podLabels)) continue;
    const name = `${p.metadata?.namespace ?? ''}/${p.metadata?.name ?? ''}`;
    out.selecting.push(name);
    let allows = false;
    for (const rule of (direction === 'ingress' ? p.spec?.ingress : p.spec?.egress) ?? []) {
      const peers = direction === 'ingress' ? ingressPeers(rule) : (rule as K8s.V1NetworkPolicyEgressRule).to;
      if (peers?.length && !peers.some((x) => peerMatches(x, p.metadata?.namespace ?? '', peer))) continue;
      if (port) {
        if (!rule.ports?.length || rule.ports.some((x) => portMatches(x, port, destinationPorts))) allows = true;
        continue;
      }
      if (!rule.ports?.length) {
        all = allows = true;
        continue;
      }
      for (const x of rule.ports) {
        const text = portsText(x, destinationPorts);
        if (text) {
          reachable.add(text);
          allows = true;
        }
      }
    }
    if (allows) out.allowedBy.push(name);
  }
  out.ports = all ? 'all' : [...reachable];
  return out;
}

/** An ingress rule's `from`: `_from` as @kubernetes/client-node reads it, `from` as the API writes it. */
export const ingressPeers = (rule: K8s.V1NetworkPolicyIngressRule): K8s.V1NetworkPolicyPeer[] | undefined => rule._from ?? (rule as { from?: K8s.V1NetworkPolicyPeer[] }).from;

/** One `from`/`to` entry: an ipBlock holds the address; else the pod in a namespace the selectors take (the policy's own without a namespaceSelector). */
function peerMatches(x: K8s.V1NetworkPolicyPeer, policyNamespace: string, peer: PolicyPeer): boolean {
  if (x.ipBlock) return !!peer.ip && inBlock(x.ipBlock, peer.ip);
  if (!x.podSelector && !x.namespaceSelector) return false; // the API refuses such an entry
  if (!peer.pod) return false;
  const namespaceOk = x.namespaceSelector ? labelSelectorMatches(x.namespaceSelector, peer.pod.namespaceLabels) : peer.pod.namespace === policyNamespace;
  return namespaceOk && labelSelectorMatches(x.podSelector, peer.pod.labels);
}

const inBlock = (block: K8s.V1IPBlock, ip: { family: Family; value: bigint }): boolean => cidrTextHolds(block.cidr, ip) && !(block.except ?? []).some((t) => cidrTextHolds(t, ip));

const protocolOf = (x: K8s.V1NetworkPolicyPort): string => (x.protocol ?? 'TCP').toUpperCase();

function portMatches(x: K8s.V1NetworkPolicyPort, traced: TracedPort, destinationPorts: NamedPort[]): boolean {
  if (protocolOf(x) !== traced.protocol) return false;
  if (x.port === undefined || x.port === null) return true;
  if (typeof x.port === 'string' && !/^\d+$/.test(x.port)) return destinationPorts.some((d) => d.name === x.port && d.protocol === traced.protocol && d.port === traced.port);
  const first = Number(x.port);
  return x.endPort !== undefined ? traced.port >= first && traced.port <= x.endPort : traced.port === first;
}

/** What one ports entry lets through, as text; '' when it names a port the receiving pod does not have. */
function portsText(x: K8s.V1NetworkPolicyPort, destinationPorts: NamedPort[]): string {
  const protocol = protocolOf(x);
  if (x.port === undefined || x.port === null) return `every ${protocol} port`;
  if (typeof x.port === 'string' && !/^\d+$/.test(x.port)) {
    const named = destinationPorts.find((d) => d.name === x.port && d.protocol === protocol);
    return named ? `${x.port} (${named.port}/${protocol})` : '';
  }
  return x.endPort !== undefined ? `${x.port}-${x.endPort}/${protocol}` : `${x.port}/${protocol}`;
}

/** A pod's container ports, for named ports (an unnamed one cannot be named by a policy). */
export function containerPorts(pod: K8s.V1Pod): NamedPort[] {
  return [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])].flatMap((c) =>
    (c.ports ?? []).filter((p) => p.name).map((p) => ({ name: p.name!, port: p.containerPort, protocol: (p.protocol ?? 'TCP').toUpperCase() as Protocol })),
  );
}

/** An address's text as a PolicyPeer's ip; undefined when it is none. */
export function peerIp(text: string | undefined): PolicyPeer['ip'] {
  if (!text) return undefined;
  try {
    return parseIp(text);
  } catch {
    return undefined;
  }
}
