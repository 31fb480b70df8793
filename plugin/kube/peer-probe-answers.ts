// What the node agent does with its peer probe (plugin/node/peer-probe.ts): an Event on its Node
// when a peer's pod network stops answering, loses large packets, or answers again; and the
// answer to another node's kni tracing a path to a pod here (peer-delivery.ts).
import type { NetworkRuntime } from '../core/network-runtime';
import { deliveryHere } from '../core/path-trace';
import { destinationOf } from '../core/trace-destination';
import { isSameIp, parseCidr } from '../ipam/ip';
import { LARGE_PACKETS_LOST, PeerProbe, ProbeChange, probeWorks } from '../node/peer-probe';
import { gatewayOf, PeerRouteStatus } from '../node/peer-routes';
import { peerIp } from './policy-verdict';

export type NodeEvent = (reason: string, message: string, type?: 'Warning' | 'Normal') => void;

/**
 * Peers of one kind of change a round tells one by one; more go in one Event naming the first
 * few. A rack cut off, or kni starting among many dead Nodes, changes hundreds of peers in one
 * round: an Event each, from every node, would be a storm of writes to the API server (the
 * kubelet's recorder folds similar events for the same reason), and a list no one reads.
 */
const ONE_BY_ONE = 3;
const NAMED = 5;

type ChangeKind = 'answers' | 'small-only' | 'silent';
const kindOf = (c: ProbeChange): ChangeKind => (probeWorks(c.now.state) ? 'answers' : c.now.state === 'small-only' ? 'small-only' : 'silent');

export function answerPeerProbe(probe: PeerProbe, rt: NetworkRuntime, routes: () => PeerRouteStatus[], nodeEvent: NodeEvent): void {
  // Each kind's Event, for one node (`one`) or several (`many`: "N peers' pod networks (…)").
  const tell = (kind: ChangeKind, peer: string, many: boolean, detail: string): void => {
    const [route, its] = many ? ["kni's routes", 'their'] : ["kni's route", 'its'];
    const look = many ? 'knictl trace to a pod there' : 'knictl node; knictl trace to a pod there';
    if (kind === 'answers') nodeEvent('PeerPodNetworkAnswers', `kni's probe of ${peer} answers again`, 'Normal');
    else if (kind === 'small-only') nodeEvent('PeerPodNetworkLosesLargePackets', `kni's probe of ${peer} through ${route} connects, but ${its} full-sized packets are lost${detail}: ${LARGE_PACKETS_LOST} (${look})`);
    else nodeEvent('PeerPodNetworkSilent', `kni's probe of ${peer} through ${route} gets no answer${detail}: what is between the nodes drops pods' packets${many ? ', or those nodes are down' : ''} (${look})`);
  };
  probe.onChanges = (changes) => {
    // The Nodes as they are now, when the Event is written: a Node deleted during the round is
    // no peer to report, and a dual-stack Node's two routes are one peer.
    const nodeOf = new Map(routes().map((r) => [r.destination, r.node]));
    const byKind = new Map<ChangeKind, Map<string, ProbeChange[]>>();
    for (const c of changes) {
      const node = nodeOf.get(c.target.destination);
      if (node === undefined) continue;
      const k = kindOf(c);
      if (!byKind.has(k)) byKind.set(k, new Map());
      const nodes = byKind.get(k)!;
      if (!nodes.has(node)) nodes.set(node, []);
      nodes.get(node)!.push(c);
    }
    const named = (node: string, cs: ProbeChange[]): string => `node ${node} (${cs.map((c) => c.target.destination).join(', ')})`;
    for (const [kind, nodes] of byKind) {
      if (nodes.size <= ONE_BY_ONE) {
        for (const [node, cs] of nodes) tell(kind, `node ${node}'s pod network (${cs.map((c) => c.target.destination).join(', ')})`, false, ` (${cs[0].now.detail})`);
        continue;
      }
      const list = [...nodes].slice(0, NAMED).map(([node, cs]) => named(node, cs)).join(', ');
      const rest = nodes.size > NAMED ? `, and ${nodes.size - NAMED} more: knictl node lists them` : '';
      tell(kind, `${nodes.size} peers' pod networks (${list}${rest})`, true, '');
    }
  };
  // Only from a peer's pods' gateway: an address no pod can open a connection from.
  probe.onDeliver = async (destination, from) => {
    const asker = peerIp(from);
    if (!asker || !routes().some((r) => isSameIp(gatewayOf(parseCidr(r.destination)), asker))) throw new Error(`${from} is no other node's pods' gateway`);
    return deliveryHere(rt, destinationOf(destination));
  };
}
