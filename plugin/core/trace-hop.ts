// What the parts of a trace (path-trace.ts, trace-service.ts, trace-node-port.ts) share: a hop,
// what a part found, what the trace asks of the cluster, and how a part hands the rest on.
import type { Family } from '../ipam/ip';
import type { Direction, DirectionVerdict, TracedPort } from '../kube/policy-verdict';
import type { ServiceBehind } from '../kube/service-backends';
import type { AddressesOf, Destination, PodName } from './trace-destination';

export interface TraceHop {
  /** "pod", "node", or the peer node's name. */
  at: string;
  what: string;
  /** What stops the packet here, and what to look at; '' when this hop works. */
  problem: string;
}

export const hopOf = (at: string, what: string, problem = ''): TraceHop => ({ at, what, problem });

/** What Trace asks of the cluster about policies (plugin/kube/network-policies.ts), one trace at a time. */
export interface PolicyVerdicts {
  /** kni enforces them (its policy is on), or an agent beside it may. */
  readonly enforcedByKni: boolean;
  /** The verdict of a pod's policies in a direction on what passes between it and a peer; undefined when they cannot be read. */
  verdict(direction: Direction, pod: PodName, peer: { pod?: PodName; ip?: string }, port?: TracedPort): Promise<DirectionVerdict | undefined>;
}

/** Who sends what a trace follows, and to which port. */
export interface PolicyContext {
  lookup: PolicyVerdicts;
  /** A pod (by name when it has one) or the node, with the address it sends from (in the destination's family). */
  sender: { pod?: PodName; ip?: string; node: boolean };
  port?: TracedPort;
}

/** The receiving end: a pod by name when known, its address; on this node (a pod here), or this node itself. */
export interface Receiver {
  pod?: PodName;
  ip: string;
  /** The receiver is the sender's own node, or (from the node) a pod on it: that traffic always passes. */
  ownNode: boolean;
  /** The port it receives on, when not the one traced (a host port's pod: its container port). */
  port?: TracedPort;
}

/**
 * What the destination is, from the node's side, and the hops from there. pod: the pod the
 * destination is, when known by name (its NetworkPolicies are then judged). receiver: the pod a
 * host port sends it on to (its address and port, not the destination's, are what policies see).
 * judged: the policies on the way were judged already, or are not of this hop (a Service's
 * ClusterIP or NodePort: each endpoint's are judged, after kube-proxy's rewrite).
 */
export interface Found {
  kind: string;
  hops: TraceHop[];
  pod?: PodName;
  receiver?: Receiver;
  judged?: boolean;
}

/** What Trace asks of the cluster (plugin/kube/service-cidrs.ts, service-backends.ts, named-destinations.ts, network-policies.ts). */
export interface ClusterLookups {
  /** The ServiceCIDR holding an address, as "name cidr"; undefined when none does; null when they are not known. */
  holding(family: Family, value: bigint): Promise<string | undefined | null>;
  /** The Service whose ClusterIP it is, and its endpoints; undefined when no Service has it. Throws when it cannot be read. */
  behind(family: Family, ip: string): Promise<ServiceBehind | undefined>;
  /** The Service taking that port on every node (a NodePort), and its endpoints; undefined when none does. Throws when it cannot be read. */
  withNodePort(family: Family, port: TracedPort): Promise<ServiceBehind | undefined>;
  addressesOf: AddressesOf;
  /** The pod of the pod network holding an address now on that node; undefined when none does, or it cannot be known. */
  podAt(ip: string, node: string): Promise<PodName | undefined>;
  /** One trace's reader of the NetworkPolicies on its path (plugin/kube/network-policies.ts). */
  policyLookup(): PolicyVerdicts;
}

/**
 * How the rest of a trace is followed: services known (a ClusterIP is named); an endpoint of a
 * Service (no Service itself); from the node (nothing masqueraded); the policies judged on the
 * way; the port it is sent to.
 */
export interface Onward {
  services?: ClusterLookups;
  endpoint?: boolean;
  fromNode?: boolean;
  policy?: PolicyContext;
  port?: TracedPort;
}

/** The trace from the node's side on to an address (path-trace.ts's beyondPod), for the parts that send it on. */
export type Follow = (dst: Destination, how: Onward) => Promise<Found>;

/** Where a hop after `hops` is: at the last one's place. */
export const lastAt = (hops: TraceHop[]): string => hops[hops.length - 1]?.at ?? 'node';

/** The end a trace reaches, for its NetworkPolicies: what it found there (a host port's pod), or the pod named as the destination. */
export const receiverOf = (found: Found, dst: Destination, fromNode: boolean): Receiver =>
  found.receiver ?? { pod: found.pod ?? dst.pod, ip: dst.text, ownNode: found.kind === (fromNode ? 'pod' : 'node') };
