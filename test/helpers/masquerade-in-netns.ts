// Run by masquerade.test.ts inside a test netns (ip netns exec): kni's masquerade table written
// there for the pod ranges and first list of peers' CIDRs given (JSON on stdin), then taken by
// element through each next list; after each step one line: reconcile's findings.
import fs from 'node:fs';
import { parseCidr } from '../../plugin/ipam/ip';
import { keepSets, masqueradeDrift, syncMasquerade, updateMasquerade } from '../../plugin/node/masquerade';

async function main(): Promise<void> {
  const { ranges, lists } = JSON.parse(fs.readFileSync(0, 'utf8')) as { ranges: string[]; lists: string[][] };
  const mine = ranges.map(parseCidr);
  const steps = lists.map((l) => keepSets({ ranges: mine, nonMasqueradeCIDRs: [], nodeIpam: { clusterCIDRs: [] } as any }, l.map(parseCidr)));
  await syncMasquerade(mine, steps[0]);
  process.stdout.write(`${JSON.stringify(await masqueradeDrift(mine, steps[0]))}\n`);
  for (let i = 1; i < steps.length; i++) {
    await updateMasquerade(mine, steps[i - 1], steps[i]);
    process.stdout.write(`${JSON.stringify(await masqueradeDrift(mine, steps[i]))}\n`);
  }
}

main().catch((e) => {
  process.stderr.write(`${(e as Error).message}\n`);
  process.exit(1);
});
