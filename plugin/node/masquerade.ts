// Masquerade for traffic leaving the cluster's pods: POSTROUTING sends what comes from a pod
// range to the chain KNI-MASQ, which returns for multicast (as the CNI plugins' ipMasq and
// flannel do) and IPv4's limited broadcast, for every pod CIDR of the
// cluster (this node's and each peer's: pod → pod across nodes keeps the pod's source address)
// and for the config's nonMasqueradeCIDRs, and masquerades the rest. Multicast and broadcast
// first: with br_netfilter (kube-proxy's nodes have it) a bridge's frames go through
// POSTROUTING too, and a pod's multicast or broadcast to the pods beside it would arrive from
// the gateway's address. Installed at node setup and when peers come or go, never per pod.
import type { Config } from '../core/config';
import { Cidr, cidrCovers, Family } from '../ipam/ip';
import { mergeCidrs } from '../ipam/cidr-merge';
import { chainDrift, deleteChain, deleteRule, ensureRule, restoreChains, ruleExists } from './iptables';

export const MASQ_CHAIN = 'KNI-MASQ';
const COMMENT = "kni: masquerade traffic leaving the cluster's pods";

const jumpRule = (c: Cidr): string[] => ['-s', c.text, '-m', 'comment', '--comment', COMMENT, '-j', MASQ_CHAIN];
// The rule of kni versions before the chain: removed where found.
const oldRule = (c: Cidr): string[] => ['-s', c.text, '!', '-d', c.text, '-m', 'comment', '--comment', `kni: masquerade traffic leaving ${c.text}`, '-j', 'MASQUERADE'];

/**
 * Where pod traffic keeps its source address: every pod CIDR of the cluster (this node's and
 * each peer's) and the destinations the config names (nonMasqueradeCIDRs). With nodeIpam the
 * cluster's pod CIDRs are known whole: they stand for the nodes' blocks inside them, so a pod on
 * a node whose block kni has not yet seen is reached with the pod's own address too, and the
 * chain does not change as nodes come and go. Without them the pod CIDRs are merged where they
 * sit side by side (cidr-merge.ts): a few rules for a cluster's blocks handed out in order.
 */
export function unmasqueraded(cfg: Pick<Config, 'ranges' | 'nonMasqueradeCIDRs' | 'nodeIpam'>, peerCidrs: Cidr[]): Cidr[] {
  const pool = cfg.nodeIpam.clusterCIDRs;
  const outsidePool = [...cfg.ranges, ...peerCidrs].filter((c) => !pool.some((p) => cidrCovers(p, c)));
  return [...pool, ...mergeCidrs(outsidePool), ...cfg.nonMasqueradeCIDRs];
}

const NEVER_MASQUERADED: Record<Family, string[]> = { 4: ['224.0.0.0/4', '255.255.255.255/32'], 6: ['ff00::/8'] };

const masqRules = (f: Family, clusterCidrs: Cidr[]): string[][] => [...NEVER_MASQUERADED[f].map((d) => ['-d', d, '-j', 'RETURN']), ...clusterCidrs.filter((c) => c.family === f).map((c) => ['-d', c.text, '-j', 'RETURN']), ['-j', 'MASQUERADE']];

/**
 * Masquerades what leaves `ranges` (this node's pod ranges) for any destination outside
 * `clusterCidrs` (every pod CIDR of the cluster, these ranges included). Idempotent.
 */
export async function syncMasquerade(ranges: Cidr[], clusterCidrs: Cidr[]): Promise<void> {
  for (const f of [4, 6] as Family[]) {
    const mine = ranges.filter((c) => c.family === f);
    if (!mine.length) continue;
    await restoreChains(f, 'nat', { [MASQ_CHAIN]: masqRules(f, clusterCidrs) });
    for (const c of mine) {
      if (await ruleExists(f, 'nat', 'POSTROUTING', oldRule(c))) await deleteRule(f, 'nat', 'POSTROUTING', oldRule(c));
      await ensureRule(f, 'nat', 'POSTROUTING', jumpRule(c));
    }
  }
}

/** Takes the rules for these ranges away (masquerade turned off, or the ranges changed). */
export async function removeMasquerade(ranges: Cidr[]): Promise<void> {
  for (const c of ranges) {
    await deleteRule(c.family, 'nat', 'POSTROUTING', jumpRule(c));
    await deleteRule(c.family, 'nat', 'POSTROUTING', oldRule(c));
  }
}

/** The rules and the chain (kni leaving the node). */
export async function removeMasqueradeChain(ranges: Cidr[]): Promise<void> {
  await removeMasquerade(ranges);
  for (const f of new Set(ranges.map((c) => c.family))) await deleteChain(f, 'nat', MASQ_CHAIN);
}

/**
 * What of syncMasquerade's rules is missing or changed now (a firewall reload, `iptables -t nat
 * -F`): one listing of the chain and one check per range, each a process — reconcile's, never
 * a pod's.
 */
export async function masqueradeDrift(ranges: Cidr[], clusterCidrs: Cidr[]): Promise<string[]> {
  const out: string[] = [];
  for (const f of [4, 6] as Family[]) {
    const mine = ranges.filter((c) => c.family === f);
    if (!mine.length) continue;
    const changed = await chainDrift(f, 'nat', MASQ_CHAIN, masqRules(f, clusterCidrs));
    if (changed) out.push(changed);
    for (const c of mine) if (!(await ruleExists(f, 'nat', 'POSTROUTING', jumpRule(c)))) out.push(`the POSTROUTING rule sending ${c.text} to ${MASQ_CHAIN} is missing`);
  }
  return out;
}
