// What kni keeps of each Node in its informer's cache: the fields it routes by and little else.
// A Node as the API serves it is mostly the kubelet's status (up to 50 container images with
// their names and sizes, capacity, node info, volumes, conditions) and managedFields: 10–30 kB of
// JSON for every Node of the cluster. Measured with Nodes of 20 kB: 55 MB of heap for 1,000 of
// them, 274 MB for 5,000, in the daemon on each node, for three fields; slimmed, 5 MB for 5,000
// (docs/node-agent.md). The informer calls its
// handlers with the object it has just cached, so the first handler slims it in place (as an
// informer's transform does in client-go).
import type * as K8s from '@kubernetes/client-node';
import type { NodeView } from '../node/peer-routes';
import { NODE_IPAM_ANNOTATION } from './node-cidr-pool';

/**
 * Drops everything of a Node kni does not read: it keeps its name, uid and resourceVersion (the
 * informer compares versions), kni's own annotation, spec.podCIDRs (spec.podCIDR on old Nodes)
 * and its InternalIPs in status.addresses.
 */
export function slimNode(n: K8s.V1Node): void {
  const m = n.metadata;
  if (m) {
    // A new object, not the parsed one with keys deleted: V8 turns an object whose keys are
    // deleted into a hash table, several times the size of the three or four fields kept.
    const slim: K8s.V1ObjectMeta = {};
    if (m.name !== undefined) slim.name = m.name;
    if (m.uid !== undefined) slim.uid = m.uid;
    if (m.resourceVersion !== undefined) slim.resourceVersion = m.resourceVersion;
    const ours = m.annotations?.[NODE_IPAM_ANNOTATION];
    if (ours !== undefined) slim.annotations = { [NODE_IPAM_ANNOTATION]: ours };
    n.metadata = slim;
  }
  // spec.podCIDR only where podCIDRs is not set (it repeats podCIDRs[0]), the InternalIPs only: one string less each, per Node of the cluster.
  if (n.spec) n.spec = { podCIDR: n.spec.podCIDRs?.length ? undefined : n.spec.podCIDR, podCIDRs: n.spec.podCIDRs };
  if (n.status) n.status = { addresses: n.status.addresses?.filter((a) => a.type === 'InternalIP') };
}

/**
 * A Node whose routing fields read as a view's (a status update: every few seconds per Node in a
 * large cluster) takes that view's strings for its name, podCIDRs and InternalIPs: the cache and
 * the view then hold one copy of them, not one more per update.
 */
export function shareRouting(n: K8s.V1Node, v: NodeView): void {
  if (n.metadata) n.metadata.name = v.name;
  if (n.spec?.podCIDRs?.length) n.spec.podCIDRs = v.podCidrs;
  let i = 0;
  for (const a of n.status?.addresses ?? []) if (a.type === 'InternalIP') a.address = v.internalIPs[i++];
}
