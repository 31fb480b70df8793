// A Service on a traced path: a ClusterIP, or a NodePort of a node's address, which the node's
// service proxy rewrites to one of the Service's endpoints before any route is looked at. Its
// Service, whether it has the port and an endpoint to go to, whether this node's kube-proxy has
// taken it up, and each endpoint's path from this node, between the sender's egress policies
// and the endpoint's ingress ones.
import type { Family } from '../ipam/ip';
import { portText, TracedPort } from '../kube/policy-verdict';
import type { ServiceBehind, ServiceEndpoint, ServicePort } from '../kube/service-backends';
import { nodePortProxyRule, ProxyRule, serviceProxyRule } from '../node/service-proxy-rules';
import type { NetworkRuntime } from './network-runtime';
import { policyHops } from './policy-hops';
import { Destination, destinationOf } from './trace-destination';
import { ClusterLookups, Follow, Found, hopOf, lastAt, PolicyContext, receiverOf, TraceHop } from './trace-hop';

/** Endpoints of a Service traced one by one; the rest are counted. */
const TRACED_ENDPOINTS = 8;

interface ServiceTrace {
  fromNode: boolean;
  policy?: PolicyContext;
  port?: TracedPort;
}

/** A ClusterIP (`range`: the ServiceCIDR holding it). `unrouted`: from the node, which has no route to it. */
export async function clusterIpHops(rt: NetworkRuntime, dst: Destination, range: string, services: ClusterLookups, follow: Follow, how: ServiceTrace & { unrouted: boolean }): Promise<Found> {
  const inRange = `${dst.text} is in the cluster's Service range (ServiceCIDR ${range})`;
  let svc: ServiceBehind | undefined;
  try {
    svc = await services.behind(dst.family, dst.text);
  } catch (e) {
    const what = `${inRange}: the node's service proxy (kube-proxy) rewrites a ClusterIP to one of its Service's endpoints before routing it; which Service cannot be read (${(e as Error).message}): trace an endpoint's address (kubectl get endpointslices -A -o wide lists them)`;
    return { kind: 'service', judged: true, hops: [hopOf('node', what)] };
  }
  if (!svc) return { kind: 'service', judged: true, hops: [hopOf('node', inRange, `no Service has ClusterIP ${dst.text}: nothing rewrites it, nothing answers (kubectl get services -A lists the ClusterIPs)`)] };
  const what = `${dst.text} is Service ${svc.namespace}/${svc.name}'s ClusterIP (ServiceCIDR ${range}${svc.ports ? `; ${svc.ports}` : ''})`;
  // A port traced is the Service's: each endpoint takes it on the port of the same name in its slice.
  const servicePort = how.port && svc.portList.find((p) => p.port === how.port!.port && p.protocol.toUpperCase() === how.port!.protocol);
  if (how.port && !servicePort) {
    return { kind: 'service', judged: true, hops: [hopOf('node', what, `Service ${svc.namespace}/${svc.name} has no port ${portText(how.port)}${svc.ports ? ` (it has ${svc.ports})` : ''}: kube-proxy rewrites none of it, nothing answers`)] };
  }
  // internalTrafficPolicy Local: only this node's endpoints take what is sent from here.
  const node = rt.cfg.kubernetes.nodeName;
  const used = usable(svc.nodeLocal ? svc.endpoints.filter((e) => e.node === node) : svc.endpoints);
  if (!used.length) return { kind: 'service', judged: true, hops: [hopOf('node', what, noEndpoint(svc, node))] };
  const proxy = await serviceProxyRule(rt.host, dst.family, dst.value, dst.text);
  const unrouted = how.unrouted ? `the node has no route to ${dst.text}: its own packets need one before kube-proxy rewrites them (a default route, or one to the Service range)` : '';
  return rewritten(rt, svc, `${what}: the node's service proxy rewrites it to ${endpointsText(used, svc.nodeLocal ? ' on this node (internalTrafficPolicy Local)' : '')}`, proxy, dst.text, unrouted, used, dst.family, follow, how, servicePort || undefined, 'service');
}

/**
 * A NodePort on this node's address `dst` (sent from a pod here, or from the node: kube-proxy
 * sends what starts on its node to any endpoint, whatever the externalTrafficPolicy).
 */
export async function nodePortHops(rt: NetworkRuntime, dst: Destination, svc: ServiceBehind, port: TracedPort, follow: Follow, how: ServiceTrace): Promise<Found> {
  const sp = svc.portList.find((p) => p.nodePort === port.port && p.protocol.toUpperCase() === port.protocol)!;
  const what = `${dst.text} port ${portText(port)} is Service ${svc.namespace}/${svc.name}'s NodePort (its port ${sp.name ? `${sp.name} ` : ''}${sp.port}/${sp.protocol})`;
  const used = usable(svc.endpoints);
  if (!used.length) return { kind: 'node-port', judged: true, hops: [hopOf('node', what, noEndpoint(svc, ''))] };
  const node = rt.cfg.kubernetes.nodeName;
  const here = used.filter((e) => e.node === node).length;
  const outside = svc.externalLocal ? `; from outside the cluster only this node's endpoints take it (externalTrafficPolicy Local): ${here ? `${here} here` : 'none here, so kube-proxy drops what comes from outside'}` : '';
  const proxy = await nodePortProxyRule(rt.host, dst.family, dst.value, port.port, port.protocol);
  return rewritten(rt, svc, `${what}: the node's service proxy rewrites it to ${endpointsText(used, '')}${outside}`, proxy, `NodePort ${portText(port)}`, '', used, dst.family, follow, how, sp, 'node-port');
}

/** Ready endpoints; with none, as kube-proxy does, those still serving while they terminate. */
function usable(eligible: ServiceEndpoint[]): ServiceEndpoint[] {
  const ready = eligible.filter((e) => e.ready);
  return ready.length ? ready : eligible.filter((e) => e.serving && e.terminating);
}

function endpointsText(used: ServiceEndpoint[], where: string): string {
  const state = used.some((e) => e.ready) ? 'ready' : 'terminating but still serving';
  return `${used.length === 1 ? `its only ${state} endpoint` : `one of its ${used.length} ${state} endpoints`}${where}`;
}

/** The Service hop (kube-proxy's rule for `subject` checked), then each endpoint's. */
async function rewritten(rt: NetworkRuntime, svc: ServiceBehind, what: string, proxy: ProxyRule, subject: string, more: string, used: ServiceEndpoint[], family: Family, follow: Follow, how: ServiceTrace, sp: ServicePort | undefined, kind: string): Promise<Found> {
  const taken = !proxy.mode
    ? 'no kube-proxy rules (iptables, nftables or IPVS mode) on this node: whatever proxies Services here is not checked'
    : proxy.unread
      ? `kube-proxy (${proxy.mode} mode): its rules for it are not read`
      : `kube-proxy (${proxy.mode} mode) ${proxy.programmed ? 'has taken it up on this node' : 'has not'}`;
  const problem = [
    proxy.mode && !proxy.programmed ? `kube-proxy (${proxy.mode} mode) has ${proxy.missing} for ${subject} on this node: it has not synced this Service (is kube-proxy running here? its log says why)` : '',
    more,
  ].filter(Boolean).join('; ');
  const hops = [hopOf('node', `${what}; ${taken}`, problem)];
  for (const ep of used.slice(0, TRACED_ENDPOINTS)) hops.push(...(await endpointHops(ep, family, follow, how.fromNode, how.policy && { ...how.policy, port: sp ? targetPort(ep, sp) : undefined })));
  if (used.length > TRACED_ENDPOINTS) hops.push(hopOf('node', `${used.length - TRACED_ENDPOINTS} more endpoints not traced (knictl trace <pod> <endpoint address> traces one)`));
  return { kind, hops, judged: true };
}

function noEndpoint(svc: ServiceBehind, node: string): string {
  const name = `Service ${svc.namespace}/${svc.name}`;
  const elsewhere = svc.endpoints.filter((e) => e.ready).length;
  if (svc.nodeLocal && node && elsewhere) {
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
async function endpointHops(ep: ServiceEndpoint, family: Family, follow: Follow, fromNode: boolean, policy?: PolicyContext): Promise<TraceHop[]> {
  const label = `endpoint${ep.pod ? ` ${ep.pod}` : ''}${policy?.port ? ` (port ${portText(policy.port)})` : ''}`;
  let dst: Destination;
  try {
    dst = destinationOf(ep.address);
  } catch {
    return [hopOf('node', `${label}: ${JSON.stringify(ep.address)}`, `its EndpointSlice's address is not an IPv${family} address`)];
  }
  const found = await follow(dst, { endpoint: true, fromNode });
  const [first, ...rest] = found.hops;
  const hops = [{ ...first, what: `${label}: ${first.what}` }, ...rest];
  const [namespace, name] = ep.pod.split('/');
  const around = await policyHops(policy, { ...receiverOf(found, dst, fromNode), pod: name ? { namespace, name } : found.pod }, lastAt(hops));
  return [...around.egress, ...hops, ...around.ingress];
}
