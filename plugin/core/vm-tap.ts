// A VM sandbox's taps (vmTap: true): one per pod interface, whatever network wires it (kni's
// built-in network, a CNI default network, a selected definition), joined to that interface by
// ingress redirects (pod/vm-wiring.ts), so that a VMM opens taps and nothing else. tap0_kni is
// the default network's interface's; the others take tap1_kni, tap2_kni… in the order they came.
import { socketInNetns, NotANetnsError } from '../netns/netns';
import { inRecordedNetns, NetnsHandle } from '../netns/open-netns';
import { withSpan } from '../observe/tracing';
import { IFF_UP, linkByName, linkSetUpByIndex } from '../netlink/link';
import type { NetlinkSocket } from '../netlink/socket';
import { rewireVmTap, tapName, unwireVmTap, wireVmTap } from '../pod/vm-wiring';
import { InterfaceRecord, SandboxRecord } from '../store/records';

/** Names the tap an interface of a vm sandbox gets (before its record goes on disk); none for containers or without vmTap. */
export function assignTap(vmTap: boolean, rec: Pick<SandboxRecord, 'kind' | 'interfaces'>, itf: InterfaceRecord): void {
  if (rec.kind !== 'vm' || !vmTap) return;
  if (!itf.network) {
    itf.tap = tapName(0);
    return;
  }
  const taken = new Set(rec.interfaces.filter((i) => i !== itf).map((i) => i.tap));
  let n = 1;
  while (taken.has(tapName(n))) n++;
  itf.tap = tapName(n);
}

/** Makes the interface's tap in the pod netns and joins it to the interface, once the interface is there. */
export function wireTap(itf: InterfaceRecord, ns: NetnsHandle): void {
  const pod = socketInNetns(ns.fd);
  try {
    withSpan('vm.tap', { 'kni.tap': itf.tap! }, () => wireVmTap(pod, ns.fd, itf.name, itf.tap!));
  } finally {
    pod.close();
  }
}

/** How an interface's tap differs from what wireTap made (pod: a socket in the sandbox's netns). */
export function tapProblems(pod: NetlinkSocket, itf: InterfaceRecord): string[] {
  if (!itf.tap) return [];
  const tap = linkByName(pod, itf.tap);
  if (!tap) return [`${itf.tap}, the VM's tap of ${itf.name}, is missing`];
  return tap.flags & IFF_UP ? [] : [`${itf.tap}, the VM's tap of ${itf.name}, is down`];
}

/**
 * Puts an interface's tap back as wireTap made it (reconcile): set up again when it was only
 * down (a VMM holding it keeps working), made again with its redirects when it was deleted (a
 * VMM that held it keeps the gone device). Returns what was wrong.
 */
export function repairTap(itf: InterfaceRecord, ns: NetnsHandle): string[] {
  const pod = socketInNetns(ns.fd);
  try {
    const problems = tapProblems(pod, itf);
    if (!problems.length) return [];
    const tap = linkByName(pod, itf.tap!);
    if (tap) pod.request(linkSetUpByIndex(tap.index, tap.name));
    // Without its interface a new tap would carry nothing: the interface's own repair (or its
    // network's CHECK) comes first.
    else if (!linkByName(pod, itf.name)) throw new Error(`its interface ${itf.name} is missing too`);
    else rewireVmTap(pod, ns.fd, itf.name, itf.tap!);
    return problems;
  } finally {
    pod.close();
  }
}

/** Deletes a vm sandbox's tap, only in the netns it was wired in; one gone took it along. */
export function unwireTap(rec: SandboxRecord, tap: string): void {
  try {
    inRecordedNetns(rec.netnsPath, rec.netnsInode, (pod) => unwireVmTap(pod, tap));
  } catch (e) {
    if (!(e instanceof NotANetnsError)) throw e;
  }
}
