// The path a pod's packet to an address takes, hop by hop, as kni and the kernel see it now
// (Trace, `knictl trace`): the pod's own route (none from the node itself), then what the
// address is — a pod on this node, another node's pod range, this node, a Service's ClusterIP
// and each of its endpoints, or somewhere outside the pod networks — and the node's route there,
// each hop with what would stop the packet. Read-only: nothing is changed, nothing is sent.
import { cidrContains, Family, isSameIp, parseCidr } from '../ipam/ip';
import { addrList } from '../netlink/addr';
import { IFF_UP, linkByIndex, linkByName } from '../netlink/link';
import { routeGet, RouteLookup } from '../netlink/route';
import type { ServiceBehind, ServiceEndpoint, ServicePort } from '../kube/service-backends';
import type { PeerRouteStatus } from '../node/peer-routes';
import { IPVS_LINK, serviceProxyRule } from '../node/service-proxy-rules';
import { socketInNetns } from '../netns/netns';
import { reopenRecordedNetns } from '../netns/open-netns';
import { SandboxRecord } from '../store/records';
import { invalid } from './errors';
import { isBuiltIn } from './network-backend';
import type { NetworkRuntime } from './network-runtime';
import { sandboxProblems } from './sandbox-check';
import { parseTracedPort, portText, TracedPort } from '../kube/policy-verdict';
import { PolicyContext, policyHops, PolicyVerdicts, Receiver } from './policy-hops';
import { AddressesOf, Destination, destinationOf, PodName, resolveDestination } from './trace-destination';

export interface TraceHop {
  /** "pod", "node", or the peer node's name. */
  at: string;
  what: string;
  /** What stops the packet here, and what to look at; '' when this hop works. */
  problem: string;
}

export interface PathTrace {
  destination: string;
  /** "self", "pod", "peer-pod", "node", "pod-range" (a pod address no pod has), "peer-node" (another node's InternalIP), "service" (a ServiceCIDR holds it), "outside", "cni-network" (its plugins route it), or "" when the pod's own route ends it. */
  kind: string;
  hops: TraceHop[];
  ok: boolean;
}

/** What Trace needs of the node agent: the other Nodes' podCIDRs and kni's routes to them. */
export interface PeerRoutes {
  name: string;
  internalIPs: string[];
  podCidrs: string[];
  routes: PeerRouteStatus[];
}

/**
 * What the destination is, from the node's side, and the hops from there; the first that applies.
 * pod: the pod the destination is, when known by name (its NetworkPolicies are then named).
 */
type Found = { kind: string; hops: TraceHop[]; pod?: PodName };
const hopOf = (at: string, what: string, problem = ''): TraceHop => ({ at, what, problem });

const via = (r: RouteLookup, dev: string): string => `${r.gateway ? `via ${r.gateway} ` : ''}dev ${dev}${r.source ? ` src ${r.source}` : ''}`;

/** What Trace asks of the cluster (plugin/kube/service-cidrs.ts, service-backends.ts, named-destinations.ts). */
export interface ClusterLookups {
  /** The ServiceCIDR holding an address, as "name cidr"; undefined when none does; null when they are not known. */
  holding(family: Family, value: bigint): Promise<string | undefined | null>;
  /** The Service whose ClusterIP it is, and its endpoints; undefined when no Service has it. Throws when it cannot be read. */
  behind(family: Family, ip: string): Promise<ServiceBehind | undefined>;
  addressesOf: AddressesOf;
  /** The pod of the pod network holding an address now on that node; undefined when none does, or it cannot be known. */
  podAt(ip: string, node: string): Promise<PodName | undefined>;
  /** One trace's reader of the NetworkPolicies on its path (plugin/kube/network-policies.ts). */
  policyLookup(): PolicyVerdicts;
}

/** Endpoints of a Service traced one by one; the rest are counted. */
const TRACED_ENDPOINTS = 8;

/** A port as the Trace RPC takes it ("80", "53/udp"); undefined when none is given. */
function tracedPort(port: unknown): TracedPort | undefined {
  if (port === undefined || port === '') return undefined;
  if (typeof port !== 'string') throw invalid('port must be a string such as "80" or "53/udp"');
  try {
    return parseTracedPort(port);
  } catch (e) {
    throw invalid((e as Error).message);
  }
}

/** The end a trace reaches, for its NetworkPolicies: what it found there, or the pod named as the destination. */
const receiverOf = (found: Found, dst: Destination, fromNode: boolean): Receiver => ({ pod: found.pod ?? dst.pod, ip: dst.text, ownNode: found.kind === (fromNode ? 'pod' : 'node') });
const lastAt = (hops: TraceHop[]): string => hops[hops.length - 1]?.at ?? 'node';
const NO_POLICY_HOPS = { egress: [] as TraceHop[], ingress: [] as TraceHop[] };

/**
 * From a pod (sandboxId), or from the node's own network namespace (fromNode: what the kubelet's
 * probes, host-network pods and NodePorts send), to an address; to a port, optionally (a
 * Service's port, or the pod's), which its NetworkPolicies are then judged on.
 */
export async function tracePath(rt: NetworkRuntime, sandboxId: string, destination: unknown, peers: PeerRoutes[] | undefined, services?: ClusterLookups, fromNode = false, portGiven?: unknown): Promise<PathTrace> {
  const port = tracedPort(portGiven);
  if (fromNode) {
    if (sandboxId) throw invalid('from_node traces from the node itself: leave sandbox_id empty');
    const dst = await resolveDestination(destination, services?.addressesOf, [4, 6]);
    const policy: PolicyContext | undefined = services && { lookup: services.policyLookup(), sender: { node: true, ip: routeGet(rt.host, dst.family, dst.value, dst.text)?.source || undefined }, port };
    const found = await beyondPod(rt, dst, peers ?? [], { services, fromNode, policy });
    const around = found.kind === 'service' ? NO_POLICY_HOPS : await policyHops(policy, receiverOf(found, dst, true), lastAt(found.hops));
    const hops = [...found.hops, ...around.ingress];
    return { destination: dst.text, kind: found.kind, hops, ok: hops.every((h) => !h.problem) };
  }
  const rec = rt.get(sandboxId);
  const families = [...new Set(rec.interfaces.flatMap((i) => i.addresses.map((a) => a.family)))];
  const dst = await resolveDestination(destination, services?.addressesOf, families.length ? families : [4, 6]);
  const leaving = podHop(rec, dst);
  const itf = rec.interfaces.find((i) => i.name === leaving.interface);
  // kni routes what leaves through its own interface; a CNI network's plugins route the rest.
  const kniRoutes = !!itf && isBuiltIn(itf) && !rt.cni;
  // NetworkPolicies are of the default network (a secondary network's are MultiNetworkPolicies, not read).
  const sender = { pod: rec.pod.name ? { namespace: rec.pod.namespace, name: rec.pod.name } : undefined, ip: itf?.addresses.find((a) => a.family === dst.family)?.address, node: false };
  const policy: PolicyContext | undefined = services && !itf?.network ? { lookup: services.policyLookup(), sender, port } : undefined;
  const onward = leaving.problem || leaving.local ? undefined : kniRoutes ? await beyondPod(rt, dst, peers ?? [], { services, policy }) : cniNetwork(rt, leaving.interface, itf?.network);
  // The interface it leaves through, compared with kni's record (an address gone, a route changed: it may still leave).
  const mismatch = onward && kniRoutes ? await sandboxProblems(rt, rec, itf).catch((e) => [(e as Error).message]) : [];
  const problem = leaving.problem || (mismatch.length ? `the pod's ${leaving.interface} does not match kni's record: ${mismatch.join('; ')} (knictl reconcile repairs it)` : '');
  const rest: Found = onward ?? { kind: leaving.local ? 'self' : '', hops: [] };
  // A Service's endpoints have their policies judged one by one (service()).
  const around = onward && rest.kind !== 'service' ? await policyHops(policy, receiverOf(rest, dst, false), lastAt(rest.hops)) : NO_POLICY_HOPS;
  const hops = [hopOf('pod', leaving.what, problem), ...around.egress, ...rest.hops, ...around.ingress];
  return { destination: dst.text, kind: rest.kind, hops, ok: hops.every((h) => !h.problem) };
}

/** How the rest of a trace is followed: services known (a ClusterIP is named); an endpoint of a Service (no Service itself); from the node (nothing masqueraded); the policies judged on the way. */
type Onward = { services?: ClusterLookups; endpoint?: boolean; fromNode?: boolean; policy?: PolicyContext };

/** What the destination is, from the node's side; an endpoint of a Service is no Service itself. */
async function beyondPod(rt: NetworkRuntime, dst: Destination, peers: PeerRoutes[], how: Onward): Promise<Found> {
  const local = await localPod(rt, dst);
  if (local) return local;
  const nodeRoute = routeGet(rt.host, dst.family, dst.value, dst.text);
  const dev = nodeRoute ? linkByIndex(rt.host, nodeRoute.index)?.name ?? `link ${nodeRoute.index}` : '';
  // A pod of another node: named as given, or looked up by its address (an endpoint is named already).
  const podOf = async (node: string): Promise<PodName | undefined> => dst.pod ?? (how.endpoint ? undefined : await how.services?.podAt(dst.text, node).catch(() => undefined));
  const found = ownAddress(rt, dst) ?? podRange(rt, dst) ?? (await peerPod(dst, peers, nodeRoute, dev, podOf));
  if (found) return found;
  const { services } = how;
  const range = services && !how.endpoint ? await services.holding(dst.family, dst.value).catch(() => null) : null;
  // The node's own packets are routed before kube-proxy's output hook rewrites them: with no route to the ClusterIP the kernel refuses them first (ENETUNREACH).
  if (range && services) return service(rt, dst, range, peers, services, { fromNode: !!how.fromNode, unrouted: !!how.fromNode && !nodeRoute, policy: how.policy });
  // Without the cluster's Service ranges, a ClusterIP looks like any address outside.
  return outside(rt, dst, peers, nodeRoute, dev, { ...how, servicesUnknown: range === null && !how.endpoint });
}

/**
 * A ClusterIP: the node's service proxy rewrites it to one of its Service's endpoints before any
 * route is looked at. Its Service, whether it has an endpoint to go to, whether this node's
 * kube-proxy has taken it up, and each endpoint's path from this node.
 */
async function service(rt: NetworkRuntime, dst: Destination, range: string, peers: PeerRoutes[], services: ClusterLookups, { fromNode, unrouted, policy }: { fromNode: boolean; unrouted: boolean; policy?: PolicyContext }): Promise<Found> {
  const inRange = `${dst.text} is in the cluster's Service range (ServiceCIDR ${range})`;
  let svc: ServiceBehind | undefined;
  try {
    svc = await services.behind(dst.family, dst.text);
  } catch (e) {
    const what = `${inRange}: the node's service proxy (kube-proxy) rewrites a ClusterIP to one of its Service's endpoints before routing it; which Service cannot be read (${(e as Error).message}): trace an endpoint's address (kubectl get endpointslices -A -o wide lists them)`;
    return { kind: 'service', hops: [hopOf('node', what)] };
  }
  if (!svc) return { kind: 'service', hops: [hopOf('node', inRange, `no Service has ClusterIP ${dst.text}: nothing rewrites it, nothing answers (kubectl get services -A lists the ClusterIPs)`)] };
  const what = `${dst.text} is Service ${svc.namespace}/${svc.name}'s ClusterIP (ServiceCIDR ${range}${svc.ports ? `; ${svc.ports}` : ''})`;
  // A port traced is the Service's: each endpoint takes it on the port of the same name in its slice.
  const servicePort = policy?.port && svc.portList.find((p) => p.port === policy.port!.port && p.protocol.toUpperCase() === policy.port!.protocol);
  if (policy?.port && !servicePort) {
    return { kind: 'service', hops: [hopOf('node', what, `Service ${svc.namespace}/${svc.name} has no port ${portText(policy.port)}${svc.ports ? ` (it has ${svc.ports})` : ''}: kube-proxy rewrites none of it, nothing answers`)] };
  }
  // internalTrafficPolicy Local: only this node's endpoints take what is sent from here.
  const node = rt.cfg.kubernetes.nodeName;
  const eligible = svc.nodeLocal ? svc.endpoints.filter((e) => e.node === node) : svc.endpoints;
  const ready = eligible.filter((e) => e.ready);
  // As kube-proxy does: with no endpoint ready, those still serving while they terminate take the traffic.
  const used = ready.length ? ready : eligible.filter((e) => e.serving && e.terminating);
  if (!used.length) return { kind: 'service', hops: [hopOf('node', what, noEndpoint(svc, node))] };
  const proxy = await serviceProxyRule(rt.host, dst.family, dst.value, dst.text);
  const taken = !proxy.mode
    ? 'no kube-proxy rules (iptables, nftables or IPVS mode) on this node: whatever proxies Services here is not checked'
    : `kube-proxy (${proxy.mode} mode) ${proxy.programmed ? 'has taken it up on this node' : 'has not'}`;
  const missing = { ipvs: 'no address on kube-ipvs0', nftables: 'no element in its service-ips map', iptables: "no rule in the nat table's KUBE-SERVICES chain", '': '' }[proxy.mode];
  const problem = [
    proxy.mode && !proxy.programmed ? `kube-proxy (${proxy.mode} mode) has ${missing} for ${dst.text} on this node: it has not synced this Service (is kube-proxy running here? its log says why)` : '',
    unrouted ? `the node has no route to ${dst.text}: its own packets need one before kube-proxy rewrites them (a default route, or one to the Service range)` : '',
  ].filter(Boolean).join('; ');
  const state = ready.length ? 'ready' : 'terminating but still serving';
  const to = `${used.length === 1 ? `its only ${state} endpoint` : `one of its ${used.length} ${state} endpoints`}${svc.nodeLocal ? ' on this node (internalTrafficPolicy Local)' : ''}`;
  const hops = [hopOf('node', `${what}: the node's service proxy rewrites it to ${to}; ${taken}`, problem)];
  for (const ep of used.slice(0, TRACED_ENDPOINTS)) hops.push(...(await endpointHops(rt, ep, dst.family, peers, fromNode, policy && { ...policy, port: servicePort ? targetPort(ep, servicePort) : undefined })));
  if (used.length > TRACED_ENDPOINTS) hops.push(hopOf('node', `${used.length - TRACED_ENDPOINTS} more endpoints not traced (knictl trace <pod> <endpoint address> traces one)`));
  return { kind: 'service', hops };
}

function noEndpoint(svc: ServiceBehind, node: string): string {
  const name = `Service ${svc.namespace}/${svc.name}`;
  const elsewhere = svc.endpoints.filter((e) => e.ready).length;
  if (svc.nodeLocal && elsewhere) {
    return `${name} has internalTrafficPolicy Local and no ready endpoint on this node (${node}), ${elsewhere} on others: kube-proxy drops what is sent to it from this node`;
  }
  const why = svc.selector
    ? `no ready pod matches its selector ${svc.selector} (kubectl get pods -n ${svc.namespace} -l ${svc.selector})`
    : 'it has no selector, and the EndpointSlices written for it list none ready';
  return `${name} has no endpoint to send it to: ${why}${svc.endpoints.length ? `; ${svc.endpoints.length} not ready` : ''}`;
}

/** The port a Service's port reaches an endpoint on: its slice's port of the same name and protocol. */
function targetPort(ep: ServiceEndpoint, sp: ServicePort): TracedPort | undefined {
  const p = ep.ports.find((x) => x.name === sp.name && x.protocol === sp.protocol);
  return p ? { port: p.port, protocol: sp.protocol.toUpperCase() as TracedPort['protocol'] } : undefined;
}

/**
 * One endpoint of a Service, traced from the node as any other address (its first hop named as
 * the endpoint, with the port it is sent to), between the sender's egress policies and the
 * endpoint's ingress ones.
 */
async function endpointHops(rt: NetworkRuntime, ep: ServiceEndpoint, family: Family, peers: PeerRoutes[], fromNode: boolean, policy?: PolicyContext): Promise<TraceHop[]> {
  const label = `endpoint${ep.pod ? ` ${ep.pod}` : ''}${policy?.port ? ` (port ${portText(policy.port)})` : ''}`;
  let dst: Destination;
  try {
    dst = destinationOf(ep.address);
  } catch {
    return [hopOf('node', `${label}: ${JSON.stringify(ep.address)}`, `its EndpointSlice's address is not an IPv${family} address`)];
  }
  const found = await beyondPod(rt, dst, peers, { endpoint: true, fromNode });
  const [first, ...rest] = found.hops;
  const hops = [{ ...first, what: `${label}: ${first.what}` }, ...rest];
  const [namespace, name] = ep.pod.split('/');
  const around = await policyHops(policy, { ...receiverOf(found, dst, fromNode), pod: name ? { namespace, name } : found.pod }, lastAt(hops));
  return [...around.egress, ...hops, ...around.ingress];
}

/** A CNI network's interface (a pod's extra network, or the default network run by CNI): its plugins route it. */
function cniNetwork(rt: NetworkRuntime, ifName: string, definition: string | undefined): Found {
  const network = definition || (rt.cni ? `the default network (CNI ${rt.defaultBackend.name})` : 'a network kni did not wire');
  return { kind: 'cni-network', hops: [hopOf('node', `leaves through ${ifName}, on ${network}: kni does not route that network beyond the pod`)] };
}

/** A pod on this node, compared with its record (an address on a CNI network's interface is that network's to route). */
async function localPod(rt: NetworkRuntime, dst: Destination): Promise<Found | undefined> {
  for (const other of rt.list()) {
    const target = other.interfaces.find((i) => isBuiltIn(i) && i.addresses.some((a) => a.address === dst.text));
    if (!target) continue;
    const name = other.pod.name ? `pod ${other.pod.namespace}/${other.pod.name}` : `sandbox ${other.id}`;
    const problems = other.phase === 'attached' ? await sandboxProblems(rt, other, target).catch((e) => [(e as Error).message]) : [];
    const hostEnd = linkByName(rt.host, target.hostVeth);
    const problem = other.phase !== 'attached' ? `its sandbox is ${other.phase}, not attached` : problems.length ? `its network does not match kni's record: ${problems.join('; ')} (knictl reconcile repairs it)` : '';
    const pod = other.pod.name ? { namespace: other.pod.namespace, name: other.pod.name } : undefined;
    return { kind: 'pod', hops: [hopOf('node', `${name} on this node (sandbox ${other.id}, ${target.name}), through host veth ${target.hostVeth}${hostEnd ? '' : ' (missing)'}`, problem)], pod };
  }
  return undefined;
}

/** This node itself (the gateway address of its pod range too). */
function ownAddress(rt: NetworkRuntime, dst: Destination): Found | undefined {
  const own = addrList(rt.host).find((a) => a.family === dst.family && a.address === dst.text);
  if (!own) return undefined;
  const link = linkByIndex(rt.host, own.index)?.name ?? `link ${own.index}`;
  // kube-proxy's IPVS mode holds every ClusterIP on this dummy link: a Service's, not the node's.
  if (link === IPVS_LINK) return undefined;
  return { kind: 'node', hops: [hopOf('node', `${dst.text} is this node's own address (${link})`)] };
}

function podRange(rt: NetworkRuntime, dst: Destination): Found | undefined {
  if (!rt.cfg.ranges.some((r) => r.family === dst.family && cidrContains(r, dst.family, dst.value))) return undefined;
  return { kind: 'pod-range', hops: [hopOf('node', `${dst.text} is in this node's pod range`, `no pod on this node has ${dst.text} (a pod gone or not yet started: knictl pods lists them)`)] };
}

/** Another node's pods: kni's route to them, and whether the node's routing takes it. */
async function peerPod(dst: Destination, peers: PeerRoutes[], nodeRoute: RouteLookup | undefined, dev: string, podOf: (node: string) => Promise<PodName | undefined>): Promise<Found | undefined> {
  for (const peer of peers) {
    const claim = peer.podCidrs.find((t) => {
      try {
        const c = parseCidr(t);
        return c.family === dst.family && cidrContains(c, dst.family, dst.value);
      } catch {
        return false;
      }
    });
    if (!claim) continue;
    const route = peer.routes.find((r) => r.destination === parseCidr(claim).text);
    const what = `${dst.text} is in node ${peer.name}'s podCIDR ${claim}`;
    if (!route || route.state !== 'installed') {
      return { kind: 'peer-pod', hops: [hopOf('node', what, `kni's route to node ${peer.name}'s pods is ${route ? `${route.state}: ${route.error}` : 'not planned'} (knictl node)`)] };
    }
    const expected = route.backend === 'vxlan' ? `dev ${route.device}` : `via ${route.via}`;
    const matches = !!nodeRoute && (route.backend === 'vxlan' ? dev === route.device : nodeRoute.gateway === route.via);
    const problem = matches ? '' : `the node's routing takes ${nodeRoute ? via(nodeRoute, dev) : 'no route'} instead: a more specific route, or a rule, wins over kni's`;
    const hops = [hopOf('node', `${what}: kni's ${route.backend} route ${route.destination} ${expected}`, problem)];
    const pod = await podOf(peer.name);
    if (!problem) hops.push(hopOf(peer.name, `delivered by node ${peer.name} to ${pod ? `pod ${pod.namespace}/${pod.name}` : 'its pod'} (trace there with knictl on ${peer.name})`));
    return { kind: 'peer-pod', hops, pod };
  }
  return undefined;
}

/** Another node itself (its InternalIP), or somewhere outside the cluster's networks: the node's route, and masquerading. */
function outside(rt: NetworkRuntime, dst: Destination, peers: PeerRoutes[], nodeRoute: RouteLookup | undefined, dev: string, how: { fromNode?: boolean; servicesUnknown: boolean }): Found {
  const peerNode = peers.find((p) => p.internalIPs.some((ip) => isSameIp(ip, dst)));
  const kind = peerNode ? 'peer-node' : 'outside';
  const what = peerNode ? `${dst.text} is node ${peerNode.name}'s InternalIP` : `${dst.text} is outside the pod networks`;
  if (!nodeRoute) return { kind, hops: [hopOf('node', what, `the node has no route to ${dst.text}`)] };
  const link = linkByIndex(rt.host, nodeRoute.index);
  const masqueraded = rt.cfg.masquerade && !rt.node.unmasqueraded().some((c) => c.family === dst.family && cidrContains(c, dst.family, dst.value));
  // Masquerading is of a pod's packets: the node's own leave with the node's address.
  const masq = how.fromNode ? '' : !rt.cfg.masquerade ? '; not masqueraded (masquerade is off)' : masqueraded ? "; masqueraded to the node's address (KNI-MASQ)" : "; not masqueraded (nonMasqueradeCIDRs, or the cluster's pod CIDRs, hold it)";
  const hint = how.servicesUnknown && !peerNode ? ". If it is a Service's ClusterIP, the node's service proxy (kube-proxy) rewrites it to one of its endpoints before this: trace an endpoint's address" : '';
  return { kind, hops: [hopOf('node', `${what}: the node routes it ${via(nodeRoute, dev)}${masq}${hint}`, link && !(link.flags & IFF_UP) ? `link ${link.name} is down` : '')] };
}

/** The pod's own route to the destination, read in its netns. */
function podHop(rec: SandboxRecord, dst: Destination): { what: string; problem: string; interface: string; local: boolean } {
  const none = { interface: '', local: false };
  if (!rec.interfaces.some((i) => i.addresses.some((a) => a.family === dst.family))) return { ...none, what: `${dst.text} is IPv${dst.family}`, problem: `the pod has no IPv${dst.family} address` };
  const ns = reopenRecordedNetns(rec.netnsPath, rec.netnsInode);
  if (ns.state !== 'same') return { ...none, what: `netns ${rec.netnsPath}`, problem: ns.reason };
  try {
    const sock = socketInNetns(ns.handle.fd);
    try {
      const r = routeGet(sock, dst.family, dst.value, dst.text);
      if (!r) return { ...none, what: `the pod's routes`, problem: `the pod has no route to ${dst.text}` };
      const link = linkByIndex(sock, r.index);
      const name = link?.name ?? `link ${r.index}`;
      if (r.local) return { what: `${dst.text} is the pod's own address`, problem: '', interface: name, local: true };
      return { what: `route to ${dst.text} ${via(r, name)}`, problem: link && !(link.flags & IFF_UP) ? `${name} is down in the pod` : '', interface: name, local: false };
    } finally {
      sock.close();
    }
  } finally {
    ns.handle.close();
  }
}
