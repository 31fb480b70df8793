// What NetworkPolicy verdicts are made of, as Trace and kni's policy share them: ports as traced
// and as containers name them, directions, a verdict, and how a policy's types and ingress
// peers read. The judging itself is plugin/policy/policy-model.ts's (one evaluator, the one the
// kernel's rules are compiled by).
import type * as K8s from '@kubernetes/client-node';
import { Family, parseIp } from '../ipam/ip';

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

export interface DirectionVerdict {
  /** The policies ("ns/name") isolating the pod in that direction; none: everything passes. */
  selecting: string[];
  /** Those with a rule letting the peer through (on the port, when one is traced). */
  allowedBy: string[];
  /** Without a traced port: what the peer may reach ("80/TCP", "every UDP port"); 'all' when a rule lists no ports. */
  ports: 'all' | string[];
  /** A ClusterNetworkPolicy rule that decides (Admin: before any NetworkPolicy; Baseline: for a pod none isolates). */
  decidedBy?: { policy: string; tier: 'Admin' | 'Baseline'; rule: string; action: 'Accept' | 'Deny' };
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

/** An ingress rule's `from`: `_from` as @kubernetes/client-node reads it, `from` as the API writes it. */
export const ingressPeers = (rule: K8s.V1NetworkPolicyIngressRule): K8s.V1NetworkPolicyPeer[] | undefined => rule._from ?? (rule as { from?: K8s.V1NetworkPolicyPeer[] }).from;

/** A pod's container ports, for named ports (an unnamed one cannot be named by a policy). */
export function containerPorts(pod: K8s.V1Pod): NamedPort[] {
  return [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])].flatMap((c) =>
    (c.ports ?? []).filter((p) => p.name).map((p) => ({ name: p.name!, port: p.containerPort, protocol: (p.protocol ?? 'TCP').toUpperCase() as Protocol })),
  );
}

/** An address's text as a PolicyPeer's ip; undefined when it is none. */
export function peerIp(text: string | undefined): { family: Family; value: bigint } | undefined {
  if (!text) return undefined;
  try {
    return parseIp(text);
  } catch {
    return undefined;
  }
}
