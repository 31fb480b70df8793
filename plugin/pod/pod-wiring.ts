// The pod side of the reference network: a veth whose pod end (eth0) sits in the pod netns
// with one address per range and default routes via the range gateways. Its host end is a
// hairpinned bridge port, or (podLink "routed") a link of its own with a route to each of the
// pod's addresses. All over netlink from this process, in three writes (the veth; the host end;
// the pod end, through a socket living in the pod netns): no spawn, no iptables.
import { socketInNetns } from '../netns/netns';
import { Family, parseIp } from '../ipam/ip';
import { addrAdd } from '../netlink/addr';
import { linkByName, linkDel, linkSetAlias, linkSetHairpin, linkSetNoLinkLocal, linkSetUp, linkSetUpByIndex, vethAdd } from '../netlink/link';
import { neighProxyAdd, neighSet } from '../netlink/neigh';
import { defaultRouteAdd, hostRouteAdd } from '../netlink/route';
import { NetlinkError, NetlinkRequest, NetlinkSocket } from '../netlink/socket';
import { recordStep } from '../observe/tracing';
import { InterfaceRecord } from '../store/records';

/** Host veths carry "kni:<sandbox id>" as their alias: lost records are rebuilt from it. */
export const VETH_ALIAS_PREFIX = 'kni:';

/**
 * Every host veth has this MAC (as Calico's do). A bridge port's MAC is only a destination the
 * bridge delivers to itself, and these ends send nothing of their own (no IPv6 link-local); a
 * routed host end is a link of its own with one pod on the other side, so one MAC serves all.
 * Distinct MACs cost each attach time in proportion to the pods already there: the bridge
 * keeps a local entry per port MAC and walks them all when a port joins (br_fdb_unsync_static).
 */
export const HOST_VETH_MAC = 'ee:ee:ee:ee:ee:ee';

export class HostVethExistsError extends Error {
  constructor(readonly hostVeth: string) {
    super(`host veth ${hostVeth} already exists`);
  }
}

export class PodInterfaceExistsError extends Error {
  constructor(readonly ifName: string) {
    super(`the pod netns already has an interface named ${ifName}`);
  }
}

/**
 * Wires one interface. Throws NotANetnsError before any change when netnsFd is not a netns, and
 * HostVethExistsError when a stale host end with that name is in the way. bridgeIndex is not
 * used for a routed interface. What was made before a failure is the caller's to undo.
 */
export function wirePod(host: NetlinkSocket, bridgeIndex: number, netnsFd: number, itf: InterfaceRecord, sandboxId: string): void {
  const started = process.hrtime.bigint();
  const vethStep = () => ({ 'kni.veth.host': itf.hostVeth, 'kni.veth.pod': itf.name });
  const addressStep = () => ({ 'kni.addresses': itf.addresses.map((a) => `${a.address}/${a.prefixLength}`) });
  const pod = socketInNetns(netnsFd);
  let hostDone = 0n;
  try {
    try {
      host.exec(wireRequests(itf, bridgeIndex, netnsFd, sandboxId, 0, 0)[0]);
    } catch (e) {
      if (e instanceof NetlinkError && e.code === 'EEXIST') throw existsError(host, netnsFd, itf);
      throw e;
    }
    const hostIndex = linkByName(host, itf.hostVeth)?.index;
    const podIndex = linkByName(pod, itf.name)?.index;
    if (!hostIndex || !podIndex) throw new Error(`the veth ${itf.hostVeth} (${itf.name} in the pod) was gone right after it was made`);
    const [, hostEnd, podEnd] = wireRequests(itf, bridgeIndex, netnsFd, sandboxId, hostIndex, podIndex);
    host.exec(hostEnd);
    hostDone = process.hrtime.bigint();
    recordStep('veth.create', started, hostDone, vethStep);
    pod.exec(podEnd);
    recordStep('pod.addresses', hostDone, process.hrtime.bigint(), addressStep);
  } catch (e) {
    if (hostDone) recordStep('pod.addresses', hostDone, process.hrtime.bigint(), addressStep, e as Error);
    else recordStep('veth.create', started, process.hrtime.bigint(), vethStep, e as Error);
    throw e;
  } finally {
    pod.close();
  }
}

/**
 * The requests of the three writes: the veth; the host end; the pod end (one write: the kernel
 * runs the requests in order, so each route finds its address).
 */
export function wireRequests(itf: InterfaceRecord, bridgeIndex: number, netnsFd: number, sandboxId: string, hostIndex: number, podIndex: number): NetlinkRequest[][] {
  return [
    [vethAdd({ name: itf.hostVeth, mac: HOST_VETH_MAC, mtu: itf.mtu, master: itf.routed ? 0 : bridgeIndex, peer: { name: itf.name, mac: itf.mac, netnsFd } })],
    [
      linkSetNoLinkLocal(hostIndex, itf.hostVeth),
      ...(itf.routed ? [] : [linkSetHairpin(hostIndex, itf.hostVeth)]),
      // The alias lets a lost record be rebuilt from the kernel alone (the kernel takes
      // IFLA_IFALIAS only on an existing link, not in the create request).
      linkSetAlias(hostIndex, itf.hostVeth, `${VETH_ALIAS_PREFIX}${sandboxId}`),
      linkSetUpByIndex(hostIndex, itf.hostVeth),
      ...(itf.routed ? routedHostEnd(hostIndex, itf) : []),
    ],
    [
      linkSetNoLinkLocal(podIndex, itf.name),
      linkSetUp('lo'),
      linkSetUpByIndex(podIndex, itf.name),
      ...itf.addresses.map((a) => addrAdd(podIndex, itf.name, { ...parseIp(a.address), prefixLength: a.prefixLength, text: a.address })),
      ...(itf.routed ? itf.addresses.flatMap((a) => routedGateway(podIndex, itf.name, a.gateway)) : []),
      ...itf.addresses.map((a) => defaultRouteAdd(a.family as Family, parseIp(a.gateway).value, podIndex, itf.name, a.gateway)),
    ],
  ];
}

/**
 * Whose name the kernel's EEXIST on the veth met, as the kernel has it now: a host end of that
 * name (a stale one, to delete and wire again), else the pod's interface, else neither any more.
 * Neither is the retired host end of this very sandbox's last detach, deleted by the reaper
 * between the create and this look (the names are the sandbox's): wired again, as for a stale
 * host end. Calling it the pod's interface failed an attach that a detach a moment before had
 * made room for ("the pod netns already has an interface named eth0", seen under load).
 */
export function existsError(host: NetlinkSocket, netnsFd: number, itf: Pick<InterfaceRecord, 'hostVeth' | 'name'>): HostVethExistsError | PodInterfaceExistsError {
  if (linkByName(host, itf.hostVeth)) return new HostVethExistsError(itf.hostVeth);
  const pod = socketInNetns(netnsFd);
  try {
    if (linkByName(pod, itf.name)) return new PodInterfaceExistsError(itf.name);
  } finally {
    pod.close();
  }
  return new HostVethExistsError(itf.hostVeth);
}

/**
 * The neighbour entries a routed interface's pod end gets written ahead: each gateway at the MAC
 * of every host end. What GetPod reports, so that a VM guest configured from it writes them too.
 */
export function gatewayNeighbours(itf: Pick<InterfaceRecord, 'routed' | 'addresses'>): { address: string; mac: string }[] {
  return itf.routed ? itf.addresses.map((a) => ({ address: a.gateway, mac: HOST_VETH_MAC })) : [];
}

/**
 * A routed pod's way to its gateway: a route to it alone, and its MAC (every host end's) written
 * ahead. As the ptp plugin's and Calico's pods have it, so that whatever copies the netns's
 * routes (Kata) finds a gateway on a link route rather than an onlink flag.
 */
function routedGateway(podIndex: number, ifname: string, gateway: string) {
  const gw = parseIp(gateway);
  return [neighSet({ family: gw.family, index: podIndex, ip: gateway, mac: HOST_VETH_MAC }), hostRouteAdd(gw.family, gw.value, podIndex, ifname, gateway)];
}

/**
 * A routed host end: a route to each pod address through it, and the pod's MAC for each written
 * ahead, as the pod has the gateway's (every host end's MAC): neither side needs to ask ARP or
 * NDP, and the host end needs no address of its own. For a guest that has not written the
 * gateway's MAC (a VM configured without GetPod's neighbours, or a pod that flushed them), the
 * host end also answers NDP for the IPv6 gateway (a proxy entry; node setup turns proxy_ndp on):
 * it has no address, so the kernel would not. IPv4's gateway is a node address, which the kernel answers ARP for on any
 * link unless the node's arp_ignore says otherwise.
 */
function routedHostEnd(hostIndex: number, itf: InterfaceRecord) {
  return itf.addresses.flatMap((a) => {
    const ip = parseIp(a.address);
    return [
      hostRouteAdd(ip.family, ip.value, hostIndex, itf.hostVeth, a.address),
      neighSet({ family: ip.family, index: hostIndex, ip: a.address, mac: itf.mac }),
      ...(ip.family === 6 ? [neighProxyAdd(6, hostIndex, a.gateway)] : []),
    ];
  });
}

/**
 * Deletes the host end (the kernel removes the pod end with it). Already gone is fine. With an
 * index, only the link of that index (not one made since under the same name).
 *
 * Synchronous, on a socket of its own: the kernel runs the delete (≈ 20 ms) inside send(), so
 * this blocks the event loop that long. Running it off the main thread (koffi .async, or a
 * worker thread with blocking calls) lost the completion about once in five runs of the NRI
 * reconnect test here, leaving the detach hung with its sandbox locked; until that is
 * understood (issue 17), correctness wins.
 */
export function unwirePod(itf: Pick<InterfaceRecord, 'hostVeth'> & { index?: number }): void {
  const sock = new NetlinkSocket();
  try {
    sock.request(linkDel(itf.hostVeth, itf.index));
  } catch (e) {
    if (!(e instanceof NetlinkError && e.code === 'ENODEV')) throw e;
  } finally {
    sock.close();
  }
}

/** The pod's MAC: 0a:58 followed by its IPv4 address (as OVN-Kubernetes does), else random. */
export function podMac(ipv4?: string): string {
  const tail = ipv4 ? ipv4.split('.', 4).map(Number) : crypto.getRandomValues(new Uint8Array(4));
  let mac = '0a:58';
  for (const b of tail) mac += b < 16 ? `:0${b.toString(16)}` : `:${b.toString(16)}`;
  return mac;
}
