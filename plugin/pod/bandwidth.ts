// Pod bandwidth limits (the kubernetes.io/ingress-bandwidth and egress-bandwidth annotations, or
// the CNI bandwidth capability), all in the node netns where the pod cannot undo them: traffic
// to the pod is shaped by a TBF on the host veth; traffic from the pod is redirected from the
// host veth's ingress to an ifb device of its own and shaped by a TBF there (the bandwidth
// plugin's layout). Only pods that ask get any of it.
import crypto from 'node:crypto';
import { ifbAdd, linkByName, linkDel, linkList } from '../netlink/link';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { ingressQdiscAdd, redirectFilterAdd, tbfQdiscAdd } from '../netlink/tc';

/** Rates in bits per second, bursts in bits (the CNI bandwidth capability's units). */
export interface Bandwidth {
  ingressRate?: number;
  ingressBurst?: number;
  egressRate?: number;
  egressBurst?: number;
}

export const IFB_ALIAS_PREFIX = 'kni-bw:';
export const ifbName = (sandboxId: string): string => `kbw${crypto.createHash('sha256').update(sandboxId).digest('hex').slice(0, 12)}`;
export const isIfbName = (name: string): boolean => /^kbw[0-9a-f]{12}$/.test(name);

// Queue at most 25 ms at the rate beyond the burst (the bandwidth plugin's latency).
const LATENCY_S = 0.025;

function tbf(index: number, name: string, rateBits: number, burstBits: number | undefined) {
  const rate = BigInt(Math.floor(rateBits / 8));
  // Without a burst: 100 ms of traffic, at least 32 KiB (a TBF burst must exceed the MTU).
  const burst = Math.max(Math.floor((burstBits ?? rateBits / 10) / 8), 32 * 1024);
  return tbfQdiscAdd(index, name, rate, burst, Math.floor((rateBits / 8) * LATENCY_S) + burst);
}

/** Shapes the pod behind hostVeth (called once the veth exists); replaces an ifb left over. */
export function shapePod(host: NetlinkSocket, sandboxId: string, hostVeth: string, bw: Bandwidth): void {
  const veth = linkByName(host, hostVeth);
  if (!veth) throw new Error(`host veth ${hostVeth} is missing`);
  if (bw.ingressRate) host.request(tbf(veth.index, hostVeth, bw.ingressRate, bw.ingressBurst));
  if (bw.egressRate) {
    const ifb = ifbName(sandboxId);
    removeIfb(host, ifb);
    host.exec(ifbAdd(ifb, `${IFB_ALIAS_PREFIX}${sandboxId}`));
    const dev = linkByName(host, ifb);
    if (!dev) throw new Error(`ifb ${ifb} vanished right after it was created`);
    host.exec([tbf(dev.index, ifb, bw.egressRate, bw.egressBurst), ingressQdiscAdd(veth.index, hostVeth), redirectFilterAdd(veth.index, hostVeth, dev.index, ifb)]);
  }
}

/** Deletes a pod's ifb (the host veth's qdiscs go with the veth). Already gone is fine. */
export function removeIfb(host: NetlinkSocket, name: string, index = 0): void {
  try {
    host.request(linkDel(name, index));
  } catch (e) {
    if (!(e instanceof NetlinkError && e.code === 'ENODEV')) throw e;
  }
}

/** kni's ifb devices in the node netns, with the sandbox each was made for. */
export function kniIfbs(host: NetlinkSocket): { name: string; index: number; sandbox: string }[] {
  return linkList(host)
    .filter((l) => l.kind === 'ifb' && isIfbName(l.name))
    .map((l) => ({ name: l.name, index: l.index, sandbox: l.alias.startsWith(IFB_ALIAS_PREFIX) ? l.alias.slice(IFB_ALIAS_PREFIX.length) : '' }));
}
