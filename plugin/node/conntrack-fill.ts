// How full the kernel's connection tracking table is in kni's network namespace (the node's).
// Once full the kernel drops every packet that would start a connection through the node —
// pods' and Services' alike, DNS over UDP first — and says so only in its own log ("nf_conntrack:
// table full, dropping packet"): from inside a pod it looks like random timeouts. kni reads it at
// each reconcile (knictl node's warnings) and when its metrics are scraped.
import fs from 'node:fs';

export interface ConntrackFill {
  /** nf_conntrack_count: this netns's entries; nf_conntrack_max: the limit each netns has. */
  entries: number;
  max: number;
}

const SYSCTL = '/proc/sys/net/netfilter';
/** Warned from this share of the table on, and until it is back under CLEAR_AT. */
const WARN_AT = 0.9;
const CLEAR_AT = 0.8;

/** The table's fill now; undefined without conntrack (the module not loaded: nothing tracked). */
export function conntrackFill(): ConntrackFill | undefined {
  try {
    const entries = Number(fs.readFileSync(`${SYSCTL}/nf_conntrack_count`, 'utf8'));
    const max = Number(fs.readFileSync(`${SYSCTL}/nf_conntrack_max`, 'utf8'));
    return Number.isFinite(entries) && Number.isFinite(max) ? { entries, max } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The node warning for this fill, or undefined: from 90 % on, and, once warned (`warned`), until
 * under 80 %. The share is said in steps of 5 % and the count left to the metric, so that the
 * text (and its log line) changes with the trend, not with every connection.
 */
export function conntrackWarning(fill: ConntrackFill | undefined, warned: boolean): string | undefined {
  if (!fill || fill.max <= 0) return undefined;
  const share = fill.entries / fill.max;
  if (share < (warned ? CLEAR_AT : WARN_AT)) return undefined;
  const step = Math.min(100, Math.floor(share * 20) * 5);
  const state = step >= 100 ? 'full' : `${step}% full or more`;
  return `the connection tracking table is ${state} (of its ${fill.max} entries; kni_conntrack_entries has the count): once full, the kernel drops every new connection through this node, pods' and Services' alike ("nf_conntrack: table full" in its log); raise net.netfilter.nf_conntrack_max (kube-proxy's conntrack.maxPerCore sets it) or find what opens so many (conntrack -S, conntrack -L)`;
}
