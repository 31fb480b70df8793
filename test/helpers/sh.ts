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
 * The link names in `ip -o link show` output from list(), once pending(output) is false: kni
 * deletes the veths of detached pods moments after the answer (its reaper). After 10 s what is
 * still there is listed, so a test asserting it gone fails as it should.
 */
export function linkNamesSettled(list: () => string, pending: (out: string) => boolean): string[] {
  let out = '';
  for (const deadline = Date.now() + 10_000; ;) {
    out = list();
    if (!pending(out) || Date.now() > deadline) break;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
  }
  return out.split('\n').map((l) => l.split(':')[1]?.trim().split('@')[0]).filter((n): n is string => Boolean(n));
}

/** A pod netns's link names, once the pod ends plain detaches set aside (kniold<ifindex>: plugin/pod/pod-end-vacate.ts) are gone. */
export const netnsLinks = (netns: string): string[] => linkNamesSettled(() => inNetns(netns, 'ip', ['-o', 'link', 'show']).out, (out) => /^\d+: kniold\d+[@:]/m.test(out));

export const ping = (fromNetns: string, address: string): boolean =>
  inNetns(fromNetns, 'ping', ['-c', '1', '-W', '2', address]).ok;

/** A unique prefix per test run, short enough for interface names. */
export const RUN = `kt${process.pid.toString(36)}`;
