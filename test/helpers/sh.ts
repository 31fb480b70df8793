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

export const ping = (fromNetns: string, address: string): boolean =>
  inNetns(fromNetns, 'ping', ['-c', '1', '-W', '2', address]).ok;

/** A unique prefix per test run, short enough for interface names. */
export const RUN = `kt${process.pid.toString(36)}`;
