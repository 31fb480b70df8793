// What the node agent does with its peer probe (plugin/node/peer-probe.ts): an Event on its Node
// when a peer's pod network stops answering, loses large packets, or answers again; and the
// answer to another node's kni tracing a path to a pod here (peer-delivery.ts).
import type { NetworkRuntime } from '../core/network-runtime';
import { deliveryHere } from '../core/path-trace';
import { destinationOf } from '../core/trace-destination';
import { isSameIp, parseCidr } from '../ipam/ip';
import { LARGE_PACKETS_LOST, PeerProbe, probeWorks } from '../node/peer-probe';
import { gatewayOf, PeerRouteStatus } from '../node/peer-routes';
import { peerIp } from './policy-verdict';

export type NodeEvent = (reason: string, message: string, type?: 'Warning' | 'Normal') => void;

export function answerPeerProbe(probe: PeerProbe, rt: NetworkRuntime, routes: () => PeerRouteStatus[], nodeEvent: NodeEvent): void {
  probe.onChange = (t, now) => {
    const peer = `node ${routes().find((r) => r.destination === t.destination)?.node ?? '?'}'s pod network (${t.destination})`;
    if (probeWorks(now.state)) nodeEvent('PeerPodNetworkAnswers', `kni's probe of ${peer} answers again`, 'Normal');
    else if (now.state === 'small-only') nodeEvent('PeerPodNetworkLosesLargePackets', `kni's probe of ${peer} through kni's route connects, but its full-sized packets are lost (${now.detail}): ${LARGE_PACKETS_LOST} (knictl node; knictl trace to a pod there)`);
    else nodeEvent('PeerPodNetworkSilent', `kni's probe of ${peer} through kni's route gets no answer (${now.detail}): what is between the nodes drops pods' packets (knictl node; knictl trace to a pod there)`);
  };
  // Only from a peer's pods' gateway: an address no pod can open a connection from.
  probe.onDeliver = async (destination, from) => {
    const asker = peerIp(from);
    if (!asker || !routes().some((r) => isSameIp(gatewayOf(parseCidr(r.destination)), asker))) throw new Error(`${from} is no other node's pods' gateway`);
    return deliveryHere(rt, destinationOf(destination));
  };
}
