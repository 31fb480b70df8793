// Another firewall on the node that judges the pods' forwarded traffic. kni accepts that traffic
// in iptables (chain KNI-FWD, forward-rules.ts), but each nftables table's chains run on their
// own and a drop or reject in any of them is final: an accept in iptables' table does not
// override it. firewalld (on by default on RHEL, Fedora and SUSE nodes; its nftables backend
// since 0.6 keeps its rules in a table named firewalld) rejects what its zones do not let
// through: pods' traffic between nodes, and from pods out of the node. kni does not change
// another firewall's rules (firewalld rewrites its table on each reload): it says what to let
// through, as the k3s and flannel guides do, at setup and at each reconcile (knictl node, and
// the Node's Event in a cluster). Worded as kubeadm's preflight warns of firewalld ("ensure …"):
// whether its zones already let the pods through is in its rules, which kni does not judge.
import { log } from '../core/log';
import type { Config } from '../core/config';
import type { Cidr } from '../ipam/ip';
import { NftTable, nftTables } from '../netlink/nftables';

export interface FirewallContext {
  /** This node's pod ranges. */
  ranges: Cidr[];
  /** vxlan's UDP port, when other nodes may be reached through it. */
  vxlanPort?: number;
  /** Whether the node is one of several (other nodes' pods are reached). */
  cluster: boolean;
}

/** The node warning for these tables, or undefined. */
export function hostFirewallWarning(tables: NftTable[], ctx: FirewallContext): string | undefined {
  const fw = tables.find((t) => t.name === 'firewalld');
  if (!fw) return undefined;
  const ranges = ctx.ranges.map((c) => c.text);
  const sources = ctx.cluster ? `every node's pod range (the cluster's pod CIDRs; this node's: ${ranges.join(', ') || 'none yet'})` : `this node's pod ranges (${ranges.join(', ') || 'none yet'})`;
  const port = ctx.cluster && ctx.vxlanPort ? `, and that vxlan's UDP port is open (firewall-cmd --permanent --add-port=${ctx.vxlanPort}/udp)` : '';
  const loses = ctx.cluster ? "pods get no answer from other nodes' pods, nor from outside the node" : 'pods get no answer from outside the node';
  return `firewalld is active on this node (nftables table ${fw.family} firewalld): its zones judge pods' forwarded traffic too, and its reject is final whatever kni accepts in iptables; ensure ${sources} ${ctx.cluster ? 'is a source' : 'are sources'} of its trusted zone (firewall-cmd --permanent --zone=trusted --add-source=<range>, then firewall-cmd --reload)${port}, or ${loses}`;
}

/** The tables of kni's netns; undefined when they cannot be read (no nf_tables: then no firewalld table either). */
export function readNftTables(): NftTable[] | undefined {
  try {
    return nftTables();
  } catch (e) {
    log('debug', 'nftables tables not read', { error: (e as Error).message });
    return undefined;
  }
}

/** The warning (knictl node; the Node's Event) while a firewall that judges pods' traffic runs here. */
export function hostFirewallNow(cfg: Pick<Config, 'kubernetes' | 'backend' | 'vxlan' | 'ranges'>): string | undefined {
  const cluster = cfg.kubernetes.nodeName !== '' && cfg.backend !== 'none';
  const vxlanPort = cfg.backend === 'vxlan' || cfg.backend === 'auto' ? cfg.vxlan.port : undefined;
  return hostFirewallWarning(readNftTables() ?? [], { ranges: cfg.ranges, vxlanPort, cluster });
}
