// Masquerade for traffic leaving the cluster's pods: POSTROUTING sends what comes from a pod
// range to the chain KNI-MASQ, which returns for every pod CIDR of the cluster (this node's
// and each peer's: pod → pod across nodes keeps the pod's source address) and masquerades the
// rest. Installed at node setup and when peers come or go (never per pod), through the
// iptables commands: the one process spawn kni makes, off the attach/detach path, and it keeps
// kni compatible with whichever iptables backend (nft or legacy) the node's other agents use.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Cidr, Family } from '../ipam/ip';

const run = promisify(execFile);
export const MASQ_CHAIN = 'KNI-MASQ';
const COMMENT = "kni: masquerade traffic leaving the cluster's pods";

const jumpRule = (c: Cidr): string[] => ['-s', c.text, '-m', 'comment', '--comment', COMMENT, '-j', MASQ_CHAIN];
// The rule of kni versions before the chain: removed where found.
const oldRule = (c: Cidr): string[] => ['-s', c.text, '!', '-d', c.text, '-m', 'comment', '--comment', `kni: masquerade traffic leaving ${c.text}`, '-j', 'MASQUERADE'];

const tool = (f: Family): string => (f === 4 ? 'iptables' : 'ip6tables');
const stderrOf = (e: unknown): string => ((e as { stderr?: string }).stderr ?? String(e)).trim();

async function ruleExists(f: Family, rule: string[]): Promise<boolean> {
  try {
    await run(tool(f), ['-w', '5', '-t', 'nat', '-C', 'POSTROUTING', ...rule]);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(`${tool(f)} is not installed: cannot masquerade pod traffic`);
    return false; // exit status 1 (or 2: the chain it jumps to is not there yet)
  }
}

/** Writes the chain whole (iptables-restore --noflush flushes only the chains it names). */
async function writeChain(f: Family, clusterCidrs: Cidr[]): Promise<void> {
  const lines = ['*nat', `:${MASQ_CHAIN} - [0:0]`];
  for (const c of clusterCidrs) if (c.family === f) lines.push(`-A ${MASQ_CHAIN} -d ${c.text} -j RETURN`);
  lines.push(`-A ${MASQ_CHAIN} -j MASQUERADE`, 'COMMIT', '');
  try {
    await new Promise<void>((resolve, reject) => {
      const child = execFile(`${tool(f)}-restore`, ['-w', '5', '--noflush'], (err, _out, stderr) => (err ? reject(Object.assign(err, { stderr })) : resolve()));
      child.stdin?.end(lines.join('\n'));
    });
  } catch (e) {
    throw new Error(`${tool(f)}-restore could not write chain ${MASQ_CHAIN}: ${stderrOf(e)}`);
  }
}

/**
 * Masquerades what leaves `ranges` (this node's pod ranges) for any destination outside
 * `clusterCidrs` (every pod CIDR of the cluster, these ranges included). Idempotent.
 */
export async function syncMasquerade(ranges: Cidr[], clusterCidrs: Cidr[]): Promise<void> {
  for (const f of [4, 6] as Family[]) {
    const mine = ranges.filter((c) => c.family === f);
    if (!mine.length) continue;
    await writeChain(f, clusterCidrs);
    for (const c of mine) {
      if (await ruleExists(f, oldRule(c))) await run(tool(f), ['-w', '5', '-t', 'nat', '-D', 'POSTROUTING', ...oldRule(c)]).catch(() => undefined);
      if (await ruleExists(f, jumpRule(c))) continue;
      try {
        await run(tool(f), ['-w', '5', '-t', 'nat', '-A', 'POSTROUTING', ...jumpRule(c)]);
      } catch (e) {
        throw new Error(`${tool(f)} could not add the masquerade rule for ${c.text}: ${stderrOf(e)}`);
      }
    }
  }
}

/** Takes the rules for these ranges away (masquerade turned off, or the ranges changed). */
export async function removeMasquerade(ranges: Cidr[]): Promise<void> {
  for (const c of ranges) {
    await run(tool(c.family), ['-w', '5', '-t', 'nat', '-D', 'POSTROUTING', ...jumpRule(c)]).catch(() => undefined);
    await run(tool(c.family), ['-w', '5', '-t', 'nat', '-D', 'POSTROUTING', ...oldRule(c)]).catch(() => undefined);
  }
}
