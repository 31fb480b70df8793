// The pod side of the reference network: a veth whose pod end (eth0) sits in the pod netns
// with one address per range and default routes via the bridge gateways; its host end is a
// hairpinned bridge port. All over netlink from this process: no spawn, no iptables.
import { Family, parseIp } from '../ipam/ip';
import { addrAdd } from '../netlink/addr';
import { linkByName, linkDel, linkSetAlias, linkSetHairpin, linkSetNoLinkLocal, linkSetUp, linkSetUpByIndex, vethAdd } from '../netlink/link';
import { defaultRouteAdd } from '../netlink/route';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { socketInNetns } from '../netns/netns';
import { withSpan } from '../observe/tracing';
import { InterfaceRecord } from '../store/records';

/**
 * Wires one interface. Throws NotANetnsError before any change when netnsFd is not a netns,
 * and HostVethExistsError when a stale host end with that name is in the way.
 */
/** Host veths carry "kni:<sandbox id>" as their alias: lost records are rebuilt from it. */
export const VETH_ALIAS_PREFIX = 'kni:';

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

export function wirePod(host: NetlinkSocket, bridgeIndex: number, netnsFd: number, itf: InterfaceRecord, sandboxId: string): void {
  const pod = socketInNetns(netnsFd);
  try {
    const podEnd = withSpan('veth.create', { 'kni.veth.host': itf.hostVeth, 'kni.veth.pod': itf.name }, () => {
      try {
        host.request(
          vethAdd({ name: itf.hostVeth, mtu: itf.mtu, master: bridgeIndex, peer: { name: itf.name, mac: itf.mac, netnsFd } }),
        );
      } catch (e) {
        if (e instanceof NetlinkError && e.code === 'EEXIST') {
          if (linkByName(host, itf.hostVeth)) throw new HostVethExistsError(itf.hostVeth);
          throw new PodInterfaceExistsError(itf.name);
        }
        throw e;
      }
      const hostEnd = linkByName(host, itf.hostVeth);
      if (!hostEnd) throw new Error(`veth ${itf.hostVeth} vanished right after it was created`);
      // The alias lets a lost record be rebuilt from the kernel alone (the kernel takes
      // IFLA_IFALIAS only on an existing link, not in the create request).
      host.exec([
        linkSetNoLinkLocal(hostEnd.index, itf.hostVeth),
        linkSetHairpin(hostEnd.index, itf.hostVeth),
        linkSetAlias(hostEnd.index, itf.hostVeth, `${VETH_ALIAS_PREFIX}${sandboxId}`),
        linkSetUpByIndex(hostEnd.index, itf.hostVeth),
      ]);
      const link = linkByName(pod, itf.name);
      if (!link) throw new Error(`${itf.name} is missing in the pod netns right after it was created`);
      return link;
    });
    withSpan('pod.addresses', { 'kni.addresses': itf.addresses.map((a) => `${a.address}/${a.prefixLength}`) }, () =>
      pod.exec([
        linkSetNoLinkLocal(podEnd.index, itf.name),
        linkSetUp('lo'),
        linkSetUp(itf.name),
        ...itf.addresses.map((a) => addrAdd(podEnd.index, itf.name, { ...parseIp(a.address), prefixLength: a.prefixLength })),
      ]),
    );
    withSpan('pod.routes', {}, () =>
      pod.exec(itf.addresses.map((a) => defaultRouteAdd(a.family as Family, parseIp(a.gateway).value, podEnd.index, itf.name))),
    );
  } finally {
    pod.close();
  }
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
  const tail = ipv4 ? ipv4.split('.').map(Number) : [...crypto.getRandomValues(new Uint8Array(4))];
  return ['0a', '58', ...tail.map((b) => b.toString(16).padStart(2, '0'))].join(':');
}
