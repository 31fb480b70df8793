// `ip netns add` makes /run/netns a mount of itself and leaves it there. The bench, its profilers
// and the test suite use it (as a runtime would) and take that mount back down when they made it
// (hack/demo.sh does the same in shell).
import { execFileSync, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

const RUN_NETNS = '/run/netns';
const isMountPoint = (dir: string): boolean => readFileSync('/proc/self/mountinfo', 'utf8').split('\n').some((l) => l.split(' ')[4] === dir);

/** Call before the first `ip netns add`; the function it returns unmounts /run/netns if this run mounted it and nothing is pinned there. */
export function guardRunNetnsMount(): () => void {
  const before = isMountPoint(RUN_NETNS);
  return () => {
    if (before || !isMountPoint(RUN_NETNS) || readdirSync(RUN_NETNS).length) return;
    try {
      execFileSync('umount', [RUN_NETNS], { stdio: 'ignore' });
    } catch {
      // busy: a netns pinned there meanwhile by someone else, theirs now
    }
  };
}

/**
 * Runs `script` again with `args` inside a throwaway node netns `<name>-node` (lo up), then
 * removes the netns, and /run/netns's mount when this run made it, whatever happened. Its exit status.
 */
export function runInNodeNetns(name: string, script: string, args: string[]): number | null {
  const release = guardRunNetnsMount();
  const netns = `${name}-node`;
  spawnSync('ip', ['netns', 'add', netns], { stdio: 'inherit' });
  try {
    spawnSync('ip', ['-n', netns, 'link', 'set', 'lo', 'up']);
    return spawnSync('nsenter', [`--net=${RUN_NETNS}/${netns}`, process.execPath, script, ...args], { stdio: 'inherit' }).status;
  } finally {
    spawnSync('ip', ['netns', 'del', netns]);
    release();
  }
}
