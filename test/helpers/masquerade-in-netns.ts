// Run by masquerade.test.ts inside a test netns (ip netns exec): kni's masquerade table written
// there for the pod ranges and first list of peers' CIDRs given (JSON on stdin), then taken by
// element through each next list; after each step one line: reconcile's findings. Then, given
// `tamper` (an nft script: someone else's change), that script and reconcile's findings once more.
import fs from 'node:fs';
import { parseCidr } from '../../plugin/ipam/ip';
import { nftApply } from '../../plugin/node/iptables';
import { keepSetDelta, keepSets, masqueradeDrift, syncMasquerade, updateMasquerade } from '../../plugin/node/masquerade';

async function main(): Promise<void> {
  const { ranges, lists, tamper } = JSON.parse(fs.readFileSync(0, 'utf8')) as { ranges: string[]; lists: string[][]; tamper?: string };
  const mine = ranges.map(parseCidr);
  const cfg = { ranges: mine, nonMasqueradeCIDRs: [], nodeIpam: { clusterCIDRs: [] } as any };
  const steps = lists.map((l) => l.map(parseCidr));
  await syncMasquerade(mine, keepSets(cfg, steps[0]));
  process.stdout.write(`${JSON.stringify(await masqueradeDrift(mine, keepSets(cfg, steps[0])))}\n`);
  for (let i = 1; i < steps.length; i++) {
    const was = new Set(lists[i - 1]);
    const now = new Set(lists[i]);
    const script = keepSetDelta(cfg, steps[i].filter((c) => !was.has(c.text)), steps[i - 1].filter((c) => !now.has(c.text)));
    await updateMasquerade(mine, script, () => keepSets(cfg, steps[i]));
    process.stdout.write(`${JSON.stringify(await masqueradeDrift(mine, keepSets(cfg, steps[i])))}\n`);
  }
  if (tamper) {
    await nftApply(tamper, 'the test\'s change');
    process.stdout.write(`${JSON.stringify(await masqueradeDrift(mine, keepSets(cfg, steps[steps.length - 1])))}\n`);
  }
}

main().catch((e) => {
  process.stderr.write(`${(e as Error).message}\n`);
  process.exit(1);
});
