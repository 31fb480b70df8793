// The iptables commands, kni's only child processes with the CNI plugins: node setup, peers
// changing, and pods that ask for host ports — never the attach/detach of a pod without port
// mappings — and `nft`: kni's own tables written whole at node setup and reconcile
// (node-guards.ts; their set elements go over nfnetlink, in the attach), and read when a trace
// asks. iptables through the commands (not netfilter netlink) so kni uses whichever backend
// (nft or legacy) the node's other agents use.
// execFile, never a shell.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { log } from '../core/log';
import { Family } from '../ipam/ip';
import { nftRun } from '../sys/libnftables';

const run = promisify(execFile);
const stderrOf = (e: unknown): string => ((e as { stderr?: string }).stderr ?? String(e)).trim();

/** '' the node's own `iptables`; else the suffix of the backend's commands (iptables-nft, …). */
type Backend = '' | '-nft' | '-legacy';
let chosen: Promise<Backend> | undefined;

/**
 * Where both backends' commands exist (kni's image ships both, as Debian's iptables package
 * does), rules written with the other backend than the kubelet's and kube-proxy's would sit in
 * tables those never list. So kni picks as kube-proxy's iptables-wrapper does: the backend
 * holding the kubelet's hint chains (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY in mangle), else
 * the one holding more rules, else nft. KNI_IPTABLES_MODE=nft|legacy decides instead.
 */
async function pickBackend(): Promise<Backend> {
  const forced = process.env.KNI_IPTABLES_MODE;
  if (forced === 'nft' || forced === 'legacy') return `-${forced}`;
  if (forced) log('warn', `KNI_IPTABLES_MODE ${JSON.stringify(forced)} is not nft or legacy: kni finds the node's backend itself`);
  const save = async (b: Backend, tool: string, table?: string): Promise<string | undefined> => {
    try {
      return (await run(`${tool}${b}-save`, table ? ['-t', table] : [])).stdout;
    } catch (e) {
      return (e as NodeJS.ErrnoException).code === 'ENOENT' ? undefined : '';
    }
  };
  const [nftMangle, legacyMangle] = await Promise.all([save('-nft', 'iptables', 'mangle'), save('-legacy', 'iptables', 'mangle')]);
  if (nftMangle === undefined || legacyMangle === undefined) return '';
  const hint = /^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY) /m;
  let pick: Backend;
  let why: string;
  if (hint.test(nftMangle)) [pick, why] = ['-nft', "the kubelet's hint chain is in nft"];
  else if (hint.test(legacyMangle)) [pick, why] = ['-legacy', "the kubelet's hint chain is in legacy"];
  else {
    const rules = async (b: Backend) => (await Promise.all(['iptables', 'ip6tables'].map((t) => save(b, t)))).join('').split('\n').filter((l) => l.startsWith('-A ')).length;
    const [nft, legacy] = await Promise.all([rules('-nft'), rules('-legacy')]);
    const n = (k: number) => `${k} rule${k === 1 ? '' : 's'}`;
    [pick, why] = legacy > nft ? ['-legacy', `legacy holds ${n(legacy)}, nft ${nft}`] : ['-nft', `nft holds ${n(nft)}, legacy ${legacy}`];
  }
  log('info', 'iptables backend chosen', { backend: pick.slice(1), why });
  return pick;
}

/** The command for a family, on the backend the node uses (chosen at the first call). */
export async function iptablesTool(f: Family): Promise<string> {
  chosen ??= pickBackend();
  return `${f === 4 ? 'iptables' : 'ip6tables'}${await chosen}`;
}

/** The tables kni writes to: nat (masquerade, host ports) and filter (forwarding). */
export type Table = 'nat' | 'filter';

/** Whether a rule is in a chain (exit status 1, or 2 for a missing target chain: no). */
export async function ruleExists(f: Family, table: Table, chain: string, rule: string[]): Promise<boolean> {
  const tool = await iptablesTool(f);
  try {
    await run(tool, ['-w', '5', '-t', table, '-C', chain, ...rule]);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(`${tool} is not installed`);
    return false;
  }
}

/** A chain's rules as `iptables -S` prints them, less the `-A <chain> `; undefined: no such chain. */
export async function chainRules(f: Family, table: Table, chain: string): Promise<string[] | undefined> {
  const tool = await iptablesTool(f);
  try {
    const { stdout } = await run(tool, ['-w', '5', '-t', table, '-S', chain]);
    return stdout.split('\n').filter((l) => l.startsWith(`-A ${chain} `)).map((l) => l.slice(chain.length + 4));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(`${tool} is not installed`);
    return undefined;
  }
}

/** How a chain kni wrote differs from `want` now (missing, or changed), in a finding; undefined: as written. */
export async function chainDrift(f: Family, table: Table, chain: string, want: string[][]): Promise<string | undefined> {
  const have = await chainRules(f, table, chain);
  if (!have) return `IPv${f} ${table} chain ${chain} is missing`;
  const lines = want.map((r) => r.join(' '));
  return have.join('\n') === lines.join('\n') ? undefined : `IPv${f} ${table} chain ${chain} was changed (${have.length} rules; kni wrote ${lines.length})`;
}

/** Appends a rule to a chain unless it is there already. */
export async function ensureRule(f: Family, table: Table, chain: string, rule: string[]): Promise<void> {
  if (await ruleExists(f, table, chain, rule)) return;
  const tool = await iptablesTool(f);
  try {
    await run(tool, ['-w', '5', '-t', table, '-A', chain, ...rule]);
  } catch (e) {
    throw new Error(`${tool} could not add a rule to ${chain}: ${stderrOf(e)}`);
  }
}

export async function deleteRule(f: Family, table: Table, chain: string, rule: string[]): Promise<void> {
  await run(await iptablesTool(f), ['-w', '5', '-t', table, '-D', chain, ...rule]).catch(() => undefined);
}

/** Deletes a chain of kni's (empty it first: the kernel refuses a chain with rules); gone already is fine. */
export async function deleteChain(f: Family, table: Table, chain: string): Promise<void> {
  const tool = await iptablesTool(f);
  await run(tool, ['-w', '5', '-t', table, '-F', chain]).catch(() => undefined);
  await run(tool, ['-w', '5', '-t', table, '-X', chain]).catch(() => undefined);
}

/**
 * Writes whole chains of a table at once: iptables-restore --noflush flushes only the chains it
 * declares, and applies the lot atomically.
 */
export async function restoreChains(f: Family, table: Table, chains: Record<string, string[][]>): Promise<void> {
  const lines = [`*${table}`];
  for (const name of Object.keys(chains)) lines.push(`:${name} - [0:0]`);
  for (const [name, rules] of Object.entries(chains)) for (const r of rules) lines.push(['-A', name, ...r.map((a) => (/[\s"']/.test(a) ? `"${a.replace(/"/g, '\\"')}"` : a))].join(' '));
  lines.push('COMMIT', '');
  const tool = await iptablesTool(f);
  const restore = `${tool}-restore`; // iptables-nft-restore, iptables-legacy-restore, or the node's
  try {
    await new Promise<void>((resolve, reject) => {
      const child = execFile(restore, ['-w', '5', '--noflush'], (err, _out, stderr) => (err ? reject(Object.assign(err, { stderr })) : resolve()));
      child.stdin?.on('error', () => undefined); // EPIPE when it exits before reading all (its status says why): not thrown from the event loop
      child.stdin?.end(lines.join('\n'));
    });
  } catch (e) {
    throw new Error(`${restore} could not write ${Object.keys(chains).join(', ')}: ${stderrOf(e)}`);
  }
}

/** What `nft -j list …` prints (JSON), read only; undefined when there is no such object, or no nft. */
async function nftListJson(...what: string[]): Promise<unknown> {
  try {
    return JSON.parse((await run('nft', ['-j', 'list', ...what], { maxBuffer: 256 << 20 })).stdout);
  } catch {
    return undefined;
  }
}

/**
 * A map's (or a set's) elements (knictl trace looks for a ClusterIP or a NodePort in
 * kube-proxy's nftables mode).
 */
export const nftMapJson = (family: 'ip' | 'ip6', table: string, map: string, kind: 'map' | 'set' = 'map'): Promise<unknown> => nftListJson(kind, family, table, map);

/** A whole table (reconcile's look at kni's masquerade table). */
export const nftTableJson = (family: 'inet' | 'ip' | 'ip6' | 'bridge', table: string): Promise<unknown> => nftListJson('table', family, table);

/** Runs an nft script (one transaction: all of it or nothing) through libnftables, no process spawned; `what` names it in errors. */
export const nftApply = (script: string, what: string): Promise<void> => nftRun(script, what);
