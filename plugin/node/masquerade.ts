// One MASQUERADE rule per pod range, for traffic leaving the pod ranges. Installed at node
// setup only (never per pod), through the iptables command: that is the one process spawn kni
// makes, off the attach/detach path, and it keeps kni compatible with whichever iptables
// backend (nft or legacy) the node's other agents use.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Cidr } from '../ipam/ip';

const run = promisify(execFile);

const ruleFor = (c: Cidr): string[] => [
  '-s', c.text, '!', '-d', c.text,
  '-m', 'comment', '--comment', `kni: masquerade traffic leaving ${c.text}`,
  '-j', 'MASQUERADE',
];

const tool = (c: Cidr): string => (c.family === 4 ? 'iptables' : 'ip6tables');

export async function ensureMasquerade(c: Cidr): Promise<void> {
  const rule = ruleFor(c);
  try {
    await run(tool(c), ['-w', '5', '-t', 'nat', '-C', 'POSTROUTING', ...rule]);
    return;
  } catch (e) {
    const err = e as NodeJS.ErrnoException & { code?: unknown; stderr?: string };
    if (err.code === 'ENOENT') throw new Error(`${tool(c)} is not installed: cannot masquerade ${c.text}`);
    // exit status 1: the rule is not there yet
  }
  try {
    await run(tool(c), ['-w', '5', '-t', 'nat', '-A', 'POSTROUTING', ...rule]);
  } catch (e) {
    throw new Error(`${tool(c)} could not add the masquerade rule for ${c.text}: ${((e as { stderr?: string }).stderr ?? String(e)).trim()}`);
  }
}

export async function removeMasquerade(c: Cidr): Promise<void> {
  try {
    await run(tool(c), ['-w', '5', '-t', 'nat', '-D', 'POSTROUTING', ...ruleFor(c)]);
  } catch {
    // already gone
  }
}
