// The node's pod ranges when they come from its Node's spec.podCIDRs (set by node IPAM, or by kni's nodeIpam). They are written to the
// state dir the first time they are adopted, and that file wins at every later start: a kni
// restarted while the API server is away comes back on the ranges its pods hold addresses in.
import fs from 'node:fs';
import path from 'node:path';
import { Cidr, parseCidr } from '../ipam/ip';
import { makeDir } from '../sys/make-dir';
import { nodePodCidrTexts } from './node-cidr-pool';
import type * as K8s from '@kubernetes/client-node';

const FILE = 'node-pod-ranges.json';

/** A Node's spec.podCIDRs (spec.podCIDR on old Nodes) as ranges, checked as config ranges are. */
export function podCidrsOfNode(node: K8s.V1Node): Cidr[] {
  const texts = nodePodCidrTexts(node);
  if (texts.length > 2) throw new Error(`spec.podCIDRs lists ${texts.length} CIDRs; at most one per IP family`);
  const out: Cidr[] = [];
  for (const t of texts) {
    const c = parseCidr(t);
    if (out.some((o) => o.family === c.family)) throw new Error(`spec.podCIDRs has two IPv${c.family} CIDRs`);
    if ((c.family === 4 && c.prefixLength > 30) || (c.family === 6 && c.prefixLength > 126)) throw new Error(`podCIDR ${c.text} is too small for a pod range`);
    out.push(c);
  }
  return out;
}

export const sameRanges = (a: Cidr[], b: Cidr[]): boolean => a.length === b.length && a.every((c) => b.some((o) => o.text === c.text));

export function readRangesFile(stateDir: string): Cidr[] | undefined {
  let text: string;
  try {
    text = fs.readFileSync(path.join(stateDir, FILE), 'utf8');
  } catch {
    return undefined;
  }
  try {
    const v = JSON.parse(text) as { ranges: string[] };
    return v.ranges.map((t) => parseCidr(t));
  } catch (e) {
    throw new Error(`${path.join(stateDir, FILE)} is unreadable (${(e as Error).message}): remove it to take the ranges from the Node again`);
  }
}

/** Atomic: a crash leaves the old file or the new one. */
export function writeRangesFile(stateDir: string, ranges: Cidr[], node: string): void {
  makeDir(stateDir, 0o700);
  const tmp = path.join(stateDir, `${FILE}.tmp`);
  fs.writeFileSync(tmp, JSON.stringify({ node, ranges: ranges.map((c) => c.text), adoptedAt: new Date().toISOString() }));
  fs.renameSync(tmp, path.join(stateDir, FILE));
}
