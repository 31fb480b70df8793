// What kni keeps of each Node in its informer's cache: the fields it routes by and little else.
// A Node as the API serves it is mostly the kubelet's status (up to 50 container images with
// their names and sizes, capacity, node info, volumes, conditions) and managedFields: 10–30 kB of
// JSON for every Node of the cluster. Measured with Nodes of 20 kB: 55 MB of heap for 1,000 of
// them, 274 MB for 5,000, in the daemon on each node, for three fields; slimmed, 5 MB for 5,000
// (docs/node-agent.md). The informer calls its
// handlers with the object it has just cached, so the first handler slims it in place (as an
// informer's transform does in client-go).
import type * as K8s from '@kubernetes/client-node';
import { NODE_IPAM_ANNOTATION } from './node-cidr-pool';

/**
 * Drops everything of a Node kni does not read: it keeps its name, uid and resourceVersion (the
 * informer compares versions), kni's own annotation, spec.podCIDR(s) and status.addresses.
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
  if (n.spec) n.spec = { podCIDR: n.spec.podCIDR, podCIDRs: n.spec.podCIDRs };
  if (n.status) n.status = { addresses: n.status.addresses };
}
