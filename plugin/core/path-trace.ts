// The path a pod's packet to an address takes, hop by hop, as kni and the kernel see it now
// (Trace, `knictl trace`): the pod's own route (none from the node itself), then what the
// address is — a pod on this node, another node's pod range, this node (with a port: a pod's
// host port or a Service's NodePort, trace-node-port.ts), a Service's ClusterIP and each of its
// endpoints (trace-service.ts), or somewhere outside the pod networks — and the node's route
// there, each hop with what would stop the packet; the NetworkPolicies on the way judged
// (policy-hops.ts). Read-only: nothing is changed, nothing is sent.
import { cidrContains, cidrTextHolds, isSameIp, parseCidr } from '../ipam/ip';
import { addrList } from '../netlink/addr';
import { IFF_UP, linkByIndex, linkByName } from '../netlink/link';
import { routeGet, RouteLookup } from '../netlink/route';
import { LARGE_PACKETS_LOST, ProbeResult, probeWorks } from '../node/peer-probe';
import { askDelivery, DeliveryAnswer } from '../node/peer-delivery';
import { gatewayOf, PeerRouteStatus } from '../node/peer-routes';
import { IPVS_LINK } from '../node/service-proxy-rules';
import { socketInNetns } from '../netns/netns';
import { reopenRecordedNetns } from '../netns/open-netns';
import { SandboxRecord } from '../store/records';
import { invalid } from './errors';
import { isBuiltIn } from './network-backend';
import type { NetworkRuntime } from './network-runtime';
import { sandboxProblems } from './sandbox-check';
import { parseTracedPort, portText, TracedPort } from '../kube/policy-verdict';
import { policyHops } from './policy-hops';
import { Destination, PodName, resolveDestination } from './trace-destination';
import { ClusterLookups, Found, hopOf, lastAt, Onward, PolicyContext, receiverOf, TraceHop } from './trace-hop';
import { ownAddressPort } from './trace-node-port';
import { clusterIpHops } from './trace-service';

export type { ClusterLookups, TraceHop } from './trace-hop';

export interface PathTrace {
  destination: string;
  /** "self", "pod", "peer-pod", "node", "host-port" and "node-port" (a port of this node's address: a pod's host port, a Service's NodePort), "pod-range" (a pod address no pod has), "peer-node" (another node's InternalIP), "service" (a ServiceCIDR holds it), "outside", "cni-network" (its plugins route it), or "" when the pod's own route ends it. */
  kind: string;
  hops: TraceHop[];
  ok: boolean;
}

/** What Trace needs of the node agent: the other Nodes' podCIDRs and kni's routes to them. */
export interface PeerRoutes {
  name: string;
  internalIPs: string[];
  podCidrs: string[];
  /** With kni's last probe through each (plugin/node/peer-probe.ts), when probing is on. */
  routes: (PeerRouteStatus & { probe?: ProbeResult })[];
}

const via = (r: RouteLookup, dev: string): string => `${r.gateway ? `via ${r.gateway} ` : ''}dev ${dev}${r.source ? ` src ${r.source}` : ''}`;

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

const NO_POLICY_HOPS = { egress: [] as TraceHop[], ingress: [] as TraceHop[] };
/** How long a trace waits for another node's kni to say how it delivers. */
const ASK_PEER_MS = 2000;

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
    const found = await beyondPod(rt, dst, peers ?? [], { services, fromNode, policy, port });
    const around = found.judged ? NO_POLICY_HOPS : await policyHops(policy, receiverOf(found, dst, true), lastAt(found.hops));
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
  const onward = leaving.problem || leaving.local ? undefined : kniRoutes ? await beyondPod(rt, dst, peers ?? [], { services, policy, port }) : cniNetwork(rt, leaving.interface, itf?.network);
  // The interface it leaves through, compared with kni's record (an address gone, a route changed: it may still leave).
  const mismatch = onward && kniRoutes ? await sandboxProblems(rt, rec, itf).catch((e) => [(e as Error).message]) : [];
  const problem = leaving.problem || (mismatch.length ? `the pod's ${leaving.interface} does not match kni's record: ${mismatch.join('; ')} (knictl reconcile repairs it)` : '');
  const rest: Found = onward ?? { kind: leaving.local ? 'self' : '', hops: [] };
  // A Service's endpoints have their policies judged one by one (trace-service.ts).
  const around = onward && !rest.judged ? await policyHops(policy, receiverOf(rest, dst, false), lastAt(rest.hops)) : NO_POLICY_HOPS;
  const hops = [hopOf('pod', leaving.what, problem), ...around.egress, ...rest.hops, ...around.ingress];
  return { destination: dst.text, kind: rest.kind, hops, ok: hops.every((h) => !h.problem) };
}

/** What the destination is, from the node's side; an endpoint of a Service is no Service itself. */
async function beyondPod(rt: NetworkRuntime, dst: Destination, peers: PeerRoutes[], how: Onward): Promise<Found> {
  const local = await localPod(rt, dst);
  if (local) return local;
  const nodeRoute = routeGet(rt.host, dst.family, dst.value, dst.text);
  const outLink = nodeRoute ? linkByIndex(rt.host, nodeRoute.index) : undefined;
  const dev = nodeRoute ? outLink?.name ?? `link ${nodeRoute.index}` : '';
  // A pod of another node: named as given, or looked up by its address (an endpoint is named already).
  const podOf = async (node: string): Promise<PodName | undefined> => dst.pod ?? (how.endpoint ? undefined : await how.services?.podAt(dst.text, node).catch(() => undefined));
  const follow = (next: Destination, onward: Onward): Promise<Found> => beyondPod(rt, next, peers, onward);
  const own = ownAddress(rt, dst);
  if (own && how.port && !how.endpoint) return ownAddressPort(rt, dst, own.link, how.port, how, follow);
  const found = own?.found ?? podRange(rt, dst) ?? (await peerPod(dst, peers, nodeRoute, dev, podOf, rt.cfg.vxlan.port, mtuNote(outLink?.mtu ?? 0, rt.node.mtu), (route) => askPeer(rt, route, dst)));
  if (found) return found;
  const { services } = how;
  const range = services && !how.endpoint ? await services.holding(dst.family, dst.value).catch(() => null) : null;
  // The node's own packets are routed before kube-proxy's output hook rewrites them: with no route to the ClusterIP the kernel refuses them first (ENETUNREACH).
  if (range && services) return clusterIpHops(rt, dst, range, services, follow, { fromNode: !!how.fromNode, unrouted: !!how.fromNode && !nodeRoute, policy: how.policy, port: how.port });
  // Without the cluster's Service ranges, a ClusterIP looks like any address outside.
  const peerNode = peers.find((p) => p.internalIPs.some((ip) => isSameIp(ip, dst)));
  return outside(rt, dst, peerNode, nodeRoute, dev, { ...how, servicesUnknown: range === null && !how.endpoint, nodePort: await peerNodePort(dst, peerNode, how) });
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

/** This node itself (the gateway address of its pod range too), and the link holding the address. */
function ownAddress(rt: NetworkRuntime, dst: Destination): { found: Found; link: string } | undefined {
  const own = addrList(rt.host).find((a) => a.family === dst.family && a.address === dst.text);
  if (!own) return undefined;
  const link = linkByIndex(rt.host, own.index)?.name ?? `link ${own.index}`;
  // kube-proxy's IPVS mode holds every ClusterIP on this dummy link: a Service's, not the node's.
  if (link === IPVS_LINK) return undefined;
  return { found: { kind: 'node', hops: [hopOf('node', `${dst.text} is this node's own address (${link})`)] }, link };
}

function podRange(rt: NetworkRuntime, dst: Destination): Found | undefined {
  if (!rt.cfg.ranges.some((r) => r.family === dst.family && cidrContains(r, dst.family, dst.value))) return undefined;
  return { kind: 'pod-range', hops: [hopOf('node', `${dst.text} is in this node's pod range`, `no pod on this node has ${dst.text} (a pod gone or not yet started: knictl pods lists them)`)] };
}

/** kni's probe through the route gets no answer, or not its large packets: what is between the nodes drops pods' packets. */
function silent(route: PeerRoutes['routes'][number], peer: string, vxlanPort: number): string {
  const p = route.probe;
  if (!p || probeWorks(p.state)) return '';
  if (p.state === 'small-only') return `kni's probe of node ${peer}'s pod network through this route has connected, but not got its full-sized packets, since ${p.since} (${p.detail}): ${LARGE_PACKETS_LOST}`;
  const between = route.backend === 'vxlan'
    ? `vxlan's UDP port ${vxlanPort} must pass between this node and node ${peer}, both ways (a firewall, or a cloud security group?)`
    : `packets with pod addresses must pass between this node and node ${peer} (a router without routes to pod CIDRs, or a cloud network's source/destination check?)`;
  return `kni's probe of node ${peer}'s pod network through this route has had no answer since ${p.since} (${p.detail}): ${between}`;
}

/** A route narrower than the pods' MTU (vxlan's, on the underlay's MTU): how their larger packets fare. */
function mtuNote(routeMtu: number, podMtu: number): string {
  if (!routeMtu || routeMtu >= podMtu) return '';
  return `; MTU ${routeMtu}: a pod's larger packets (its MTU is ${podMtu}) are answered "fragmentation needed" by this node, and path MTU discovery sends them smaller`;
}

/** How another node's kni delivers to dst: asked through kni's route to its pods, from this node's gateway (peer-delivery.ts). */
function askPeer(rt: NetworkRuntime, route: PeerRouteStatus, dst: Destination): Promise<DeliveryAnswer> {
  const { port } = rt.cfg.peerProbe;
  const theirs = parseCidr(route.destination);
  const ours = rt.cfg.ranges.find((r) => r.family === theirs.family);
  if (!port || !ours) return Promise.reject(new Error('not asked: the peer probe is off here (peerProbe.port 0)'));
  return askDelivery({ address: gatewayOf(theirs), source: gatewayOf(ours) }, port, dst.text, ASK_PEER_MS);
}

/** How this node delivers to one of its pods, for another node's kni tracing a path here. */
export async function deliveryHere(rt: NetworkRuntime, dst: Destination): Promise<DeliveryAnswer> {
  // The pods' gateway there is that node's own address (a trace to it: "is the node there up?").
  const found = (await localPod(rt, dst)) ?? ownAddress(rt, dst)?.found ?? podRange(rt, dst);
  if (!found) return { hops: [{ what: `${dst.text} is not in this node's pod ranges (${rt.cfg.ranges.map((r) => r.text).join(', ') || 'none'})`, problem: "this node does not take it: the other node's route and this node's pod ranges disagree (a podCIDR changed?)" }] };
  return { hops: found.hops.map(({ what, problem }) => ({ what, problem })), ...(found.pod ? { pod: found.pod } : {}) };
}

/** Another node's pods: kni's route to them, whether the node's routing takes it, and how that node's kni delivers it. */
async function peerPod(dst: Destination, peers: PeerRoutes[], nodeRoute: RouteLookup | undefined, dev: string, podOf: (node: string) => Promise<PodName | undefined>, vxlanPort: number, mtu: string, ask: (route: PeerRouteStatus) => Promise<DeliveryAnswer>): Promise<Found | undefined> {
  for (const peer of peers) {
    const claim = peer.podCidrs.find((t) => cidrTextHolds(t, dst));
    if (!claim) continue;
    const route = peer.routes.find((r) => r.destination === parseCidr(claim).text);
    const what = `${dst.text} is in node ${peer.name}'s podCIDR ${claim}`;
    if (!route || route.state !== 'installed') {
      return { kind: 'peer-pod', hops: [hopOf('node', what, `kni's route to node ${peer.name}'s pods is ${route ? `${route.state}: ${route.error}` : 'not planned'} (knictl node)`)] };
    }
    const expected = route.backend === 'vxlan' ? `dev ${route.device}` : `via ${route.via}`;
    const matches = !!nodeRoute && (route.backend === 'vxlan' ? dev === route.device : nodeRoute.gateway === route.via);
    const problem = matches ? silent(route, peer.name, vxlanPort) : `the node's routing takes ${nodeRoute ? via(nodeRoute, dev) : 'no route'} instead: a more specific route, or a rule, wins over kni's`;
    const hops = [hopOf('node', `${what}: kni's ${route.backend} route ${route.destination} ${expected}${matches ? mtu : ''}`, problem)];
    if (problem) return { kind: 'peer-pod', hops, pod: await podOf(peer.name) };
    const there = await ask(route).catch((e: Error) => e);
    if (!(there instanceof Error)) {
      hops.push(...there.hops.map((h) => hopOf(peer.name, h.what, h.problem)));
      // That node named its pod: no need to look it up by address in the API.
      return { kind: 'peer-pod', hops, pod: dst.pod ?? there.pod ?? (await podOf(peer.name)) };
    }
    const pod = await podOf(peer.name);
    hops.push(hopOf(peer.name, `delivered by node ${peer.name} to ${pod ? `pod ${pod.namespace}/${pod.name}` : 'its pod'} (its kni did not say how: ${there.message}; trace there with knictl on ${peer.name})`));
    return { kind: 'peer-pod', hops, pod };
  }
  return undefined;
}

/** Another node's InternalIP to a port a Service takes on every node: what that node's kube-proxy does with it. */
async function peerNodePort(dst: Destination, peer: PeerRoutes | undefined, how: Onward): Promise<string> {
  if (!peer || !how.port || !how.services || how.endpoint) return '';
  const svc = await how.services.withNodePort(dst.family, how.port).catch(() => undefined);
  return svc ? `; port ${portText(how.port)} is Service ${svc.namespace}/${svc.name}'s NodePort: node ${peer.name}'s service proxy sends it to one of its endpoints (knictl trace --from-node ${dst.text} --port ${how.port.port}/${how.port.protocol.toLowerCase()} on ${peer.name} traces it there)` : '';
}

/** Another node itself (its InternalIP: `peerNode`), or somewhere outside the cluster's networks: the node's route, and masquerading. */
function outside(rt: NetworkRuntime, dst: Destination, peerNode: PeerRoutes | undefined, nodeRoute: RouteLookup | undefined, dev: string, how: { fromNode?: boolean; servicesUnknown: boolean; nodePort: string }): Found {
  const kind = peerNode ? 'peer-node' : 'outside';
  const what = peerNode ? `${dst.text} is node ${peerNode.name}'s InternalIP` : `${dst.text} is outside the pod networks`;
  if (!nodeRoute) return { kind, hops: [hopOf('node', what, `the node has no route to ${dst.text}`)] };
  const link = linkByIndex(rt.host, nodeRoute.index);
  const masqueraded = rt.cfg.masquerade && !rt.node.unmasqueraded().some((c) => c.family === dst.family && cidrContains(c, dst.family, dst.value));
  // Masquerading is of a pod's packets: the node's own leave with the node's address.
  const masq = how.fromNode ? '' : !rt.cfg.masquerade ? '; not masqueraded (masquerade is off)' : masqueraded ? "; masqueraded to the node's address (nftables inet kni-masquerade)" : "; not masqueraded (nonMasqueradeCIDRs, or the cluster's pod CIDRs, hold it)";
  const hint = how.servicesUnknown && !peerNode ? ". If it is a Service's ClusterIP, the node's service proxy (kube-proxy) rewrites it to one of its endpoints before this: trace an endpoint's address" : '';
  return { kind, hops: [hopOf('node', `${what}: the node routes it ${via(nodeRoute, dev)}${masq}${hint}${how.nodePort}`, link && !(link.flags & IFF_UP) ? `link ${link.name} is down` : '')] };
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
