// The iptables commands, kni's only child processes: node setup, peers changing, and pods that
// ask for host ports — never the attach/detach of a pod without port mappings. Through the
// commands (not netfilter netlink) so kni uses whichever backend (nft or legacy) the node's
// other agents use. execFile, never a shell.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Family } from '../ipam/ip';

const run = promisify(execFile);

export const iptablesTool = (f: Family): string => (f === 4 ? 'iptables' : 'ip6tables');
const stderrOf = (e: unknown): string => ((e as { stderr?: string }).stderr ?? String(e)).trim();

/** Whether a rule is in a nat chain (exit status 1, or 2 for a missing target chain: no). */
export async function natRuleExists(f: Family, chain: string, rule: string[]): Promise<boolean> {
  try {
    await run(iptablesTool(f), ['-w', '5', '-t', 'nat', '-C', chain, ...rule]);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(`${iptablesTool(f)} is not installed`);
    return false;
  }
}

/** Appends a rule to a nat chain unless it is there already. */
export async function ensureNatRule(f: Family, chain: string, rule: string[]): Promise<void> {
  if (await natRuleExists(f, chain, rule)) return;
  try {
    await run(iptablesTool(f), ['-w', '5', '-t', 'nat', '-A', chain, ...rule]);
  } catch (e) {
    throw new Error(`${iptablesTool(f)} could not add a rule to ${chain}: ${stderrOf(e)}`);
  }
}

export async function deleteNatRule(f: Family, chain: string, rule: string[]): Promise<void> {
  await run(iptablesTool(f), ['-w', '5', '-t', 'nat', '-D', chain, ...rule]).catch(() => undefined);
}

/**
 * Writes whole nat chains at once: iptables-restore --noflush flushes only the chains it
 * declares, and applies the lot atomically.
 */
export async function restoreNatChains(f: Family, chains: Record<string, string[][]>): Promise<void> {
  const lines = ['*nat'];
  for (const name of Object.keys(chains)) lines.push(`:${name} - [0:0]`);
  for (const [name, rules] of Object.entries(chains)) for (const r of rules) lines.push(['-A', name, ...r.map((a) => (/[\s"']/.test(a) ? `"${a.replace(/"/g, '\\"')}"` : a))].join(' '));
  lines.push('COMMIT', '');
  try {
    await new Promise<void>((resolve, reject) => {
      const child = execFile(`${iptablesTool(f)}-restore`, ['-w', '5', '--noflush'], (err, _out, stderr) => (err ? reject(Object.assign(err, { stderr })) : resolve()));
      child.stdin?.end(lines.join('\n'));
    });
  } catch (e) {
    throw new Error(`${iptablesTool(f)}-restore could not write ${Object.keys(chains).join(', ')}: ${stderrOf(e)}`);
  }
}
