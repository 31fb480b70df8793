// The extra step for a VM sandbox with vmTap: a persistent tap in the pod netns joined to the
// pod's veth end by ingress redirects both ways (Kata's tcfilter model), so a VMM only has to
// open the tap. The guest NIC must use the veth end's MAC; the addresses stay on the veth end.
import fs from 'node:fs';
import * as libc from '../sys/libc';
import { linkByName, linkDel, linkSetUp } from '../netlink/link';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { ingressQdiscAdd, ingressQdiscDel, redirectFilterAdd } from '../netlink/tc';
import { inNetns } from '../netns/netns';

const TUNSETIFF = 0x400454ca;
const TUNSETPERSIST = 0x400454cb;
export const IFF_TAP = 0x0002;
export const IFF_NO_PI = 0x1000;

/** The struct ifreq TUNSETIFF takes: the name, then the flags. */
export function ifreq(name: string, flags: number): Buffer {
  const b = Buffer.alloc(40);
  b.write(name, 0, 15, 'utf8');
  b.writeUInt16LE(flags, 16);
  return b;
}

/** The tap for the pod's n-th interface: "tap0_kni" (Kata names its own "tap0_kata"). */
export const tapName = (n: number): string => `tap${n}_kni`;

/** Creates the tap in the pod netns and joins it to podIf; pod is a socket in that netns. */
export function wireVmTap(pod: NetlinkSocket, netnsFd: number, podIf: string, tap: string): void {
  // A tun device belongs to the netns /dev/net/tun was opened in: open it inside the pod netns.
  inNetns(netnsFd, () => {
    const fd = fs.openSync('/dev/net/tun', 'r+');
    try {
      libc.ioctl(fd, TUNSETIFF, ifreq(tap, IFF_TAP | IFF_NO_PI));
      libc.ioctlInt(fd, TUNSETPERSIST, 1);
    } finally {
      fs.closeSync(fd);
    }
  });
  const veth = linkByName(pod, podIf);
  const tapLink = linkByName(pod, tap);
  if (!veth || !tapLink) throw new Error(`${podIf} or ${tap} is missing in the pod netns`);
  pod.exec([
    linkSetUp(tap),
    ingressQdiscAdd(veth.index, podIf),
    ingressQdiscAdd(tapLink.index, tap),
    redirectFilterAdd(veth.index, podIf, tapLink.index, tap),
    redirectFilterAdd(tapLink.index, tap, veth.index, podIf),
  ]);
}

/**
 * Makes a tap that was deleted or changed behind kni's back again: the tap and the pod
 * interface's redirect to it (the tap's qdisc and filters go with the tap; the interface's do not).
 */
export function rewireVmTap(pod: NetlinkSocket, netnsFd: number, podIf: string, tap: string): void {
  unwireVmTap(pod, tap);
  const veth = linkByName(pod, podIf);
  if (veth) {
    try {
      pod.request(ingressQdiscDel(veth.index, podIf));
    } catch (e) {
      // No ingress qdisc there (EINVAL or ENOENT, by kernel version): nothing to take away.
      if (!(e instanceof NetlinkError && (e.code === 'EINVAL' || e.code === 'ENOENT'))) throw e;
    }
  }
  wireVmTap(pod, netnsFd, podIf, tap);
}

/** Deletes the tap (its qdisc and filters go with it). Already gone is fine. */
export function unwireVmTap(pod: NetlinkSocket, tap: string): void {
  try {
    pod.request(linkDel(tap));
  } catch (e) {
    if (!(e instanceof NetlinkError && e.code === 'ENODEV')) throw e;
  }
}
