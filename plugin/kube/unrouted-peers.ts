// Other Nodes kni cannot route to because they have no podCIDRs: the node agent's warning
// (knictl node, readiness warnings).
/**
 * The warning for the other Nodes with no podCIDRs, `unrouted`, of `peerCount` others (undefined: none): kni routes to a node's pods by
 * its Node's podCIDRs, so those nodes' pods cannot be reached from here. Every other Node
 * without them, while this kni's ranges come from its config, is a cluster without node IPAM.
 */
export function unroutedPeersWarning(unrouted: string[], peerCount: number, rangesFromConfig: boolean): string | undefined {
  if (!unrouted.length) return undefined;
  const names = [...unrouted].sort();
  const shown = names.length > 5 ? `${names.slice(0, 5).join(', ')} and ${names.length - 5} more` : names.join(', ');
  const all = names.length === peerCount;
  const hint = rangesFromConfig && all
    ? ": kni's ranges come from its config here, and no other Node has podCIDRs: is node IPAM off? Pods reach across nodes only with it (kube-controller-manager --allocate-node-cidrs, which kind and kubeadm with --pod-network-cidr turn on), or kni's own: nodeIpam in its config"
    : ': their pods are unreachable from this node until node IPAM gives them podCIDRs';
  return `Node${names.length === 1 ? '' : 's'} ${shown} ha${names.length === 1 ? 's' : 've'} no spec.podCIDRs, and kni routes to other nodes' pods by them${hint}`;
}
