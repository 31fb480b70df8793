// Running commands from tests (never from kni itself).
import { execFileSync, spawnSync } from 'node:child_process';

export const sh = (cmd: string, args: string[]): string => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

export function trySh(cmd: string, args: string[]): { ok: boolean; out: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return { ok: r.status === 0, out: `${r.stdout}${r.stderr}` };
}

/** Runs a command inside the netns pinned at path. */
export const inNetns = (netns: string, cmd: string, args: string[]): { ok: boolean; out: string } =>
  trySh('nsenter', [`--net=${netns}`, cmd, ...args]);

/**
 * The names of a pod netns's links, once the pod ends that plain detaches set down and renamed
 * (kniold<ifindex>: plugin/pod/pod-end-vacate.ts) are gone: kni's reaper deletes them moments
 * after the answer. After 10 s one still there is listed, so a test asserting it gone fails.
 */
export function netnsLinks(netns: string): string[] {
  let names: string[] = [];
  for (const deadline = Date.now() + 10_000; ;) {
    names = inNetns(netns, 'ip', ['-o', 'link', 'show']).out.split('\n').map((l) => l.split(':')[1]?.trim().split('@')[0]).filter((n): n is string => Boolean(n));
    if (!names.some((n) => /^kniold\d+$/.test(n)) || Date.now() > deadline) return names;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
  }
}

export const ping = (fromNetns: string, address: string): boolean =>
  inNetns(fromNetns, 'ping', ['-c', '1', '-W', '2', address]).ok;

/** A unique prefix per test run, short enough for interface names. */
export const RUN = `kt${process.pid.toString(36)}`;
