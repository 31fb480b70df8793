// The pods' forwarded traffic accepted in the filter table: on a node whose FORWARD policy is
// DROP (Docker sets it; firewalld, ufw and hardened hosts may), everything the node routes to
// and from the pods would be dropped, routed pods' traffic to each other included. FORWARD
// jumps to KNI-FWD, appended, so that a host firewall's or a policy agent's rules placed before
// it still decide first; KNI-FWD accepts what comes from or goes to this node's pod ranges.
// Written at node setup and when the setting changes, never per pod.
import { Cidr, Family } from '../ipam/ip';
import { chainDrift, deleteChain, deleteRule, ensureRule, restoreChains, ruleExists } from './iptables';

export const FORWARD_CHAIN = 'KNI-FWD';
const JUMP = ['-m', 'comment', '--comment', "kni: accept the pods' forwarded traffic", '-j', FORWARD_CHAIN];

const acceptRules = (mine: Cidr[]): string[][] => mine.flatMap((c) => [['-s', c.text, '-j', 'ACCEPT'], ['-d', c.text, '-j', 'ACCEPT']]);
const families = (ranges: Cidr[]): Family[] => ([4, 6] as Family[]).filter((f) => ranges.some((c) => c.family === f));

/** Accepts the forwarded traffic of `ranges` (this node's pod ranges). Idempotent. */
export async function syncForwardRules(ranges: Cidr[]): Promise<void> {
  for (const f of families(ranges)) {
    await restoreChains(f, 'filter', { [FORWARD_CHAIN]: acceptRules(ranges.filter((c) => c.family === f)) });
    await ensureRule(f, 'filter', 'FORWARD', JUMP);
  }
}

/** Takes the jump and the chain away (the setting turned off). */
export async function removeForwardRules(ranges: Cidr[]): Promise<void> {
  for (const f of families(ranges)) {
    await deleteRule(f, 'filter', 'FORWARD', JUMP);
    await deleteChain(f, 'filter', FORWARD_CHAIN);
  }
}

/** What of syncForwardRules' work is missing or changed now: reconcile's, never a pod's. */
export async function forwardDrift(ranges: Cidr[]): Promise<string[]> {
  const out: string[] = [];
  for (const f of families(ranges)) {
    const changed = await chainDrift(f, 'filter', FORWARD_CHAIN, acceptRules(ranges.filter((c) => c.family === f)));
    if (changed) out.push(changed);
    if (!(await ruleExists(f, 'filter', 'FORWARD', JUMP))) out.push(`the IPv${f} FORWARD rule jumping to ${FORWARD_CHAIN} is missing`);
  }
  return out;
}
