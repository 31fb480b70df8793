// A port of this node's own address on a traced path (knictl trace --port): a host port of a pod
// here (kni's DNAT in KNI-HOSTPORTS, checked), else a Service's NodePort (kube-proxy's), else a
// socket of the node listening on it; nothing of these is "connection refused".
import { isSameIp } from '../ipam/ip';
import { portText, TracedPort } from '../kube/policy-verdict';
import { HOSTPORT_CHAIN, hostPortDnat } from '../node/host-ports';
import { ruleExists } from '../node/iptables';
import { nodeListens } from '../node/node-listeners';
import type { NetworkRuntime } from './network-runtime';
import { Destination, destinationOf } from './trace-destination';
import { Follow, Found, hopOf, Onward } from './trace-hop';
import { nodePortHops } from './trace-service';

/** `dst` is this node's own address (on `link`), sent to `port`. */
export async function ownAddressPort(rt: NetworkRuntime, dst: Destination, link: string, port: TracedPort, how: Onward, follow: Follow): Promise<Found> {
  const own = `${dst.text} is this node's own address (${link})`;
  const hostPort = await hostPortOf(rt, dst, own, port, how, follow);
  if (hostPort) return hostPort;
  let unread = '';
  if (how.services) {
    try {
      const svc = await how.services.withNodePort(dst.family, port);
      if (svc) return await nodePortHops(rt, dst, svc, port, follow, { fromNode: !!how.fromNode, policy: how.policy, port });
    } catch (e) {
      unread = ` (whether a Service takes it as its NodePort cannot be read: ${(e as Error).message})`;
    }
  }
  const none = `no pod's host port${how.services ? ", no Service's NodePort" : ''}`;
  const listens = nodeListens(port.protocol, dst.family, port.port, dst.value);
  if (listens === undefined) return { kind: 'node', hops: [hopOf('node', `${own}; ${none} is ${portText(port)}${unread}: a process of the node must take it (SCTP sockets are not read)`)] };
  if (listens) return { kind: 'node', hops: [hopOf('node', `${own}; a socket of the node listens on ${portText(port)} (ss -lntup names its process)`)] };
  return { kind: 'node', hops: [hopOf('node', own, `nothing on this node takes ${portText(port)}: ${none}, no socket listening on it${unread}${port.protocol === 'TCP' ? ' (a connection is refused)' : ''}`)] };
}

/** A host port of a pod on this node, given by its runtime's port mappings: kni's DNAT rule, then the pod. */
async function hostPortOf(rt: NetworkRuntime, dst: Destination, own: string, port: TracedPort, how: Onward, follow: Follow): Promise<Found | undefined> {
  for (const target of rt.node.hostPortTargets()) {
    const m = target.mappings.find((x) => x.hostPort === port.port && x.protocol.toUpperCase() === port.protocol && (!x.hostIp || isSameIp(x.hostIp, dst)));
    if (!m) continue;
    const rec = rt.sandboxes.get(target.sandbox);
    const name = rec?.pod.name ? `pod ${rec.pod.namespace}/${rec.pod.name}` : `sandbox ${target.sandbox}`;
    const podAddress = target.addresses.find((a) => a.family === dst.family)?.address;
    if (!podAddress) return { kind: 'host-port', hops: [hopOf('node', `${own}; port ${portText(port)} is a host port of ${name}`, `the pod has no IPv${dst.family} address: nothing sends it on`)] };
    const present = await ruleExists(dst.family, 'nat', HOSTPORT_CHAIN, hostPortDnat(dst.family, target.sandbox, podAddress, m)).catch(() => false);
    const to: TracedPort = { port: m.containerPort, protocol: port.protocol };
    const what = `${own}; port ${portText(port)} is a host port of ${name}: kni's ${HOSTPORT_CHAIN} sends it to ${podAddress} port ${portText(to)}`;
    const problem = present ? '' : `kni's DNAT rule for it is missing from the nat table's ${HOSTPORT_CHAIN} chain (knictl reconcile writes it again)`;
    const pod = rec?.pod.name ? { namespace: rec.pod.namespace, name: rec.pod.name } : undefined;
    const onward = present ? (await follow(destinationOf(podAddress), { endpoint: true, fromNode: how.fromNode })).hops : [];
    return { kind: 'host-port', hops: [hopOf('node', what, problem), ...onward], receiver: { pod, ip: podAddress, port: to, ownNode: !!how.fromNode } };
  }
  return undefined;
}
