// Pod ranges for Nodes without spec.podCIDRs (a cluster made without node IPAM), handed out by
// kni itself from nodeIpam.clusterCIDRs: one block per family per Node, the lowest free one, as
// kube-controller-manager's range allocator does. Which Node holds which block is kept in one
// ConfigMap, replaced with the resourceVersion it was read at: of two kni claiming at once one
// wins, the other reads again and takes another block. Each kni then sets its own Node's
// spec.podCIDRs, as that allocator would: every kni, and anything else reading podCIDRs
// (kube-proxy's --detect-local-mode=NodeCIDR, a CNI plugin's IPAM), finds them where node IPAM
// puts them. The annotation kni.dev/node-ipam says kni set them.
import type * as K8s from '@kubernetes/client-node';
import type { NodeIpamConfig } from '../core/config';
import { bitsOf, Cidr, cidrContains, cidrsOverlap, cidrSize, formatIp, parseCidr } from '../ipam/ip';
import { isConflict, KubeApi, withTimeout } from './kube-api';
import { listNodes } from './node-list';

export const NODE_IPAM_ANNOTATION = 'kni.dev/node-ipam';

/** The lowest block of prefix length `mask` in `pool` that overlaps none of `taken` (undefined: none left). */
export function freeBlock(pool: Cidr, mask: number, taken: Cidr[]): Cidr | undefined {
  const shift = BigInt(bitsOf(pool.family) - mask);
  const count = 1n << BigInt(mask - pool.prefixLength);
  const poolLast = pool.base + cidrSize(pool) - 1n;
  // Each taken CIDR covers a run of block indexes; the first index no run covers is free.
  const runs = taken
    .filter((t) => t.family === pool.family && cidrsOverlap(t, pool))
    .map((t) => {
      const last = t.base + cidrSize(t) - 1n;
      return [t.base > pool.base ? (t.base - pool.base) >> shift : 0n, ((last < poolLast ? last : poolLast) - pool.base) >> shift] as const;
    })
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  let next = 0n;
  for (const [first, last] of runs) {
    if (first > next) break;
    if (last + 1n > next) next = last + 1n;
  }
  return next < count ? parseCidr(`${formatIp(pool.family, pool.base + (next << shift))}/${mask}`) : undefined;
}

/** Texts as CIDRs; undefined when any is not one. */
function cidrsOf(texts: string[]): Cidr[] | undefined {
  try {
    return texts.map((t) => parseCidr(t.trim()));
  } catch {
    return undefined;
  }
}

/** A ConfigMap entry ("a,b") as CIDRs; undefined when empty or when any is not one. */
const cidrList = (text: string | undefined): Cidr[] | undefined => (text ? cidrsOf(text.split(',')) : undefined);

/** A Node's pod CIDRs: spec.podCIDRs (spec.podCIDR on old Nodes). */
export function nodePodCidrTexts(node: K8s.V1Node): string[] {
  if (node.spec?.podCIDRs?.length) return node.spec.podCIDRs;
  return node.spec?.podCIDR ? [node.spec.podCIDR] : [];
}

/** Who set a Node's pod CIDRs: "kni's nodeIpam", "node IPAM" (anyone else), '' while it has none. */
export function nodePodCidrSource(node: K8s.V1Node): string {
  const texts = nodePodCidrTexts(node);
  if (!texts.length) return '';
  return node.metadata?.annotations?.[NODE_IPAM_ANNOTATION] === texts.join(',') ? "kni's nodeIpam" : 'node IPAM';
}

const maskOf = (cfg: NodeIpamConfig, pool: Cidr): number => (pool.family === 4 ? cfg.nodeMaskSizeIPv4 : cfg.nodeMaskSizeIPv6);

/** Whether `blocks` are one block of the right size inside each pool. */
const fits = (cfg: NodeIpamConfig, blocks: Cidr[]): boolean =>
  blocks.length === cfg.clusterCIDRs.length && cfg.clusterCIDRs.every((p) => blocks.some((b) => b.family === p.family && b.prefixLength === maskOf(cfg, p) && cidrContains(p, b.family, b.base)));

/**
 * This Node's blocks: the ones the ConfigMap records for it, else new ones (`preferred`, the
 * ranges its pods held before, when still free), recorded there. Entries of Nodes that no longer
 * exist are dropped as it is written, so their blocks go back to the pool.
 */
export async function claimNodeCidrs(api: KubeApi, cfg: NodeIpamConfig, nodeName: string, preferred: Cidr[] = []): Promise<Cidr[]> {
  const [namespace, name] = cfg.configMap.split('/');
  for (let attempt = 0; attempt < 20; attempt++) {
    let cm: K8s.V1ConfigMap | undefined;
    try {
      cm = await withTimeout(api.core.readNamespacedConfigMap({ namespace, name }), 10_000, `read ConfigMap ${cfg.configMap}`);
    } catch (e) {
      if ((e as { code?: number }).code !== 404) throw e;
    }
    // From the API server's watch cache (resourceVersion "0"): a claim lists every Node, and
    // nodes joining together claim together. Only dropping an entry needs the Node to be surely
    // gone (a cache a moment behind would not have a Node just made): confirmed by a read.
    let nodes = (await withTimeout(listNodes(api, '0'), 10_000, 'list Nodes')).items;
    let present = new Set(nodes.map((n) => n.metadata?.name));
    if (Object.keys(cm?.data ?? {}).some((k) => !present.has(k) && k !== nodeName)) {
      nodes = (await withTimeout(listNodes(api), 10_000, 'list Nodes')).items;
      present = new Set(nodes.map((n) => n.metadata?.name));
    }
    const data: Record<string, string> = {};
    for (const [k, v] of Object.entries(cm?.data ?? {})) if (present.has(k) || k === nodeName) data[k] = v;
    const recorded = cidrList(data[nodeName]);
    if (recorded && fits(cfg, recorded)) return recorded;
    const taken = [
      ...Object.entries(data).filter(([k]) => k !== nodeName).flatMap(([, v]) => cidrList(v) ?? []),
      ...nodes.filter((n) => n.metadata?.name !== nodeName).flatMap((n) => cidrsOf(nodePodCidrTexts(n)) ?? []),
    ];
    const blocks = cfg.clusterCIDRs.map((pool) => {
      const mask = maskOf(cfg, pool);
      const again = preferred.find((p) => p.family === pool.family && p.prefixLength === mask && cidrContains(pool, p.family, p.base) && !taken.some((t) => cidrsOverlap(t, p)));
      const block = again ?? freeBlock(pool, mask, taken);
      if (!block) throw new Error(`nodeIpam: ${pool.text} has no free /${mask} left for Node ${nodeName} (${taken.filter((t) => t.family === pool.family).length} taken)`);
      return block;
    });
    data[nodeName] = blocks.map((b) => b.text).join(',');
    try {
      if (cm) await withTimeout(api.core.replaceNamespacedConfigMap({ namespace, name, body: { ...cm, data } }), 10_000, `write ConfigMap ${cfg.configMap}`);
      else await withTimeout(api.core.createNamespacedConfigMap({ namespace, body: { metadata: { name, namespace, labels: { 'kni.dev/part': 'setup' } }, data } }), 10_000, `create ConfigMap ${cfg.configMap}`);
      return blocks;
    } catch (e) {
      if (!isConflict(e)) throw e;
    }
    // Another kni wrote first. Nodes joining together claim together: each waits a random
    // while, longer as it loses again, so that they do not all read and write again at once.
    await new Promise((r) => setTimeout(r, Math.random() * Math.min(1000, 50 * (attempt + 1))));
  }
  throw new Error(`nodeIpam: ConfigMap ${cfg.configMap} kept changing under 20 claims in a row`);
}

/**
 * This Node's spec.podCIDRs (and podCIDR, the first), set once as node IPAM sets them: the API
 * server refuses to change them once set, so a Node given others meanwhile keeps those.
 */
export async function setNodePodCidrs(api: KubeApi, nodeName: string, blocks: Cidr[]): Promise<void> {
  const texts = blocks.map((b) => b.text);
  const body = { metadata: { annotations: { [NODE_IPAM_ANNOTATION]: texts.join(',') } }, spec: { podCIDR: texts[0], podCIDRs: texts } };
  await withTimeout(api.core.patchNode({ name: nodeName, body }, api.k8s.setHeaderOptions('Content-Type', api.k8s.PatchStrategy.MergePatch)), 10_000, 'patch Node');
}
