// The nftables text of MultiNetworkPolicy, for one pod: a table `inet kni-multi-policy` inside the
// pod's netns. A secondary network's packets never cross the node's forward hook (macvlan,
// ipvlan and host-device interfaces leave the node by their parent, a bridge network's by its
// bridge), so they are judged where they all pass: the pod's input and output hooks, by the
// interface they come in or go out by. A connection's packets after its first pass on
// conntrack's word; a new one on an interface whose network has policies for the pod goes to
// that interface's chain, made as a NetworkPolicy chain is (policy-model.ts's podChains), its
// peers the pods' addresses on that network. The table is written whole in one transaction;
// with nothing to judge, it is taken away.
import { modelSets, peerElements, PodChain, podChains, PolicyPod } from './policy-model';
import { MultiModel } from './multi-policies';

export const MULTI_POLICY_TABLE = 'kni-multi-policy';
const T = `inet ${MULTI_POLICY_TABLE}`;

/** A pod's interface on a secondary network, as its record has it. */
export interface NetworkInterface {
  name: string;
  /** Its NetworkAttachmentDefinition's "namespace/name". */
  network: string;
  ips: string[];
}

/** The pod's table taken away (what the script is when no policy judges any of its interfaces). */
export const REMOVE_MULTI_TABLE = `table ${T} {}\ndelete table ${T}\n`;

/** A name nft takes in a quoted string as it is: interface names are checked at selection, this keeps the script sound anyway. */
const plainName = (s: string): boolean => /^[\w.@+-]{1,15}$/.test(s);

/** The pod's table, or its removal when no policy is for any of its interfaces' networks. `peers(network)`: the cluster's pods on it. */
export function multiTableScript(multi: MultiModel, pod: PolicyPod, interfaces: NetworkInterface[], peers: (network: string) => PolicyPod[]): string {
  const sets = new Map<string, string>();
  const elements = new Map<string, Set<string>>();
  const chains: PodChain[] = [];
  const jumps: Record<'input' | 'output', string[]> = { input: [], output: [] };
  interfaces.forEach((itf, k) => {
    const model = multi.networks.get(itf.network);
    if (!model || !plainName(itf.name)) return;
    const local = { ...pod, ips: itf.ips, end: itf.name };
    let judged = false;
    for (const [d, hook, match] of [['ingress', 'input', 'iifname'], ['egress', 'output', 'oifname']] as const) {
      const name = `${d === 'ingress' ? 'in' : 'out'}-${k}`;
      const own = podChains(model, local, d, name);
      if (!own.length) continue;
      judged = true;
      chains.push(...own);
      jumps[hook].push(`${match} "${itf.name}" jump ${name}`);
    }
    if (!judged) return;
    for (const [set, type] of modelSets(model)) if (!sets.has(set)) sets.set(set, type);
    for (const peer of peers(itf.network)) {
      for (const [set, es] of peerElements(model, peer)) {
        const have = elements.get(set) ?? new Set<string>();
        for (const e of es) have.add(e);
        elements.set(set, have);
      }
    }
  });
  if (!chains.length) return REMOVE_MULTI_TABLE;
  const lines = [`table ${T} {}`, `delete table ${T}`];
  const list = (set: string) => {
    const all = [...(elements.get(set) ?? [])];
    return all.length ? ` elements = { ${all.join(', ')} }` : '';
  };
  lines.push(
    `table ${T} {`,
    ...[...sets].map(([name, type]) => `  set ${name} { type ${type};${list(name)} }`),
    ...chains.map((c) => `  chain ${c.name} {\n${c.rules.map((r) => `    ${r}\n`).join('')}  }`),
    ...(['input', 'output'] as const).filter((h) => jumps[h].length).flatMap((h) => [
      `  chain ${h} {`,
      `    type filter hook ${h} priority filter; policy accept;`,
      '    ct state established,related accept',
      ...jumps[h].map((j) => `    ${j}`),
      '  }',
    ]),
    '}',
  );
  return `${lines.join('\n')}\n`;
}
