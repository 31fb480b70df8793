// A detach whose caller keeps the netns (a plain Detach, a CNI DEL that names no pod sandbox, a
// network removed from a running pod) must leave the netns free for an interface of the same
// name at once. Deleting the veth does that but costs the kernel ≈ 20 ms inside the send (an
// RCU grace period; moving the pod end to another netns costs the same). Instead, in one write,
// the pod end is set down (the kernel drops its routes and IPv6 addresses with that), renamed,
// and its IPv4 addresses, which a down link keeps, are removed: ≈ 0.3–0.6 ms. Its host end
// is then retired to the reaper like a runtime's, which deletes it (and the pod end with it)
// after the answer: until then the netns shows a down link named kniold<ifindex>, with nothing
// on it.
//
// Only the pod end kni made is touched: the recorded netns (same inode), a veth of the recorded
// name and MAC. Anything else, and any error, leaves it to the caller's delete before answering.
import { log } from '../core/log';
import { parseIp } from '../ipam/ip';
import { addrDel } from '../netlink/addr';
import { linkByName, linkRename, linkSetDownByIndex } from '../netlink/link';
import { inRecordedNetns } from '../netns/open-netns';
import { InterfaceRecord, SandboxRecord } from '../store/records';

/** The name a vacated pod end waits under: unique in its netns, as its ifindex is. */
const vacatedName = (index: number): string => `kniold${index}`;

/** Whether the pod end was taken out of the netns's way (else delete the veth before answering). */
export function vacatePodEnd(rec: Pick<SandboxRecord, 'netnsPath' | 'netnsInode'>, itf: Pick<InterfaceRecord, 'name' | 'mac' | 'addresses'>): boolean {
  if (rec.netnsInode === undefined || !itf.mac) return false;
  try {
    const vacated = inRecordedNetns(rec.netnsPath, rec.netnsInode, (sock) => {
      const link = linkByName(sock, itf.name);
      if (!link || link.kind !== 'veth' || link.mac !== itf.mac.toLowerCase()) return false;
      const name = vacatedName(link.index);
      if (name.length > 15) return false;
      const v4 = itf.addresses.filter((a) => a.family === 4);
      // Down first: a kernel before 6.2 renames only a link that is down.
      sock.exec([
        linkSetDownByIndex(link.index, itf.name),
        linkRename(link.index, itf.name, name),
        ...v4.map((a) => addrDel(link.index, name, { ...parseIp(a.address), prefixLength: a.prefixLength, text: a.address })),
      ]);
      return true;
    });
    return vacated === true;
  } catch (e) {
    log('debug', 'cannot set a pod end aside; its veth is deleted before the answer', { netns: rec.netnsPath, interface: itf.name, error: (e as Error).message });
    return false;
  }
}
