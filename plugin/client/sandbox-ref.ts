// A sandbox as an operator names it on knictl's command line. knictl pods shows CRI ids by their
// first 13 characters, as crictl does, and crictl takes any unique prefix; operators also know
// pods by namespace/name, not by sandbox. kni's API itself takes exact ids only: a prefix that
// matches today could match another sandbox tomorrow, and Detach must never guess.

/** What matching needs of a ListPods entry. */
export interface SandboxEntry {
  sandbox_id: string;
  created_at?: string;
  pod?: { name?: string; namespace?: string };
}

export const SANDBOX_REF_HELP = 'a sandbox id or a unique prefix of one, or its pod as namespace/name (or name alone)';

/** The one sandbox `ref` names among `sandboxes`, or why there is not exactly one (and how many it matches). */
export function matchSandbox(sandboxes: SandboxEntry[], ref: string): { id: string } | { error: string; matches: number } {
  if (!ref) return { error: 'no sandbox named (the argument is empty)', matches: 0 };
  if (sandboxes.some((s) => s.sandbox_id === ref)) return { id: ref };
  const byPod = (s: SandboxEntry) => !!s.pod?.name && (ref.includes('/') ? `${s.pod.namespace}/${s.pod.name}` === ref : s.pod.name === ref);
  const found = sandboxes.filter((s) => s.sandbox_id.startsWith(ref) || byPod(s));
  if (found.length === 1) return { id: found[0].sandbox_id };
  if (!found.length) return { error: `no sandbox matches ${JSON.stringify(ref)} (${SANDBOX_REF_HELP})`, matches: 0 };
  const list = found.map((s) => `${s.sandbox_id}${s.pod?.name ? ` (pod ${s.pod.namespace}/${s.pod.name}${s.created_at ? `, created ${s.created_at}` : ''})` : ''}`);
  return { error: `${JSON.stringify(ref)} matches ${found.length} sandboxes; name one by its id:\n  ${list.join('\n  ')}`, matches: found.length };
}
