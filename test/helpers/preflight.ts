// Loaded before any test (mocha --require): the suite needs root and a few tools, and says so
// loudly instead of skipping.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { guardRunNetnsMount } from '../../bench/run-netns-mount';

const problems: string[] = [];
if (process.getuid?.() !== 0) problems.push('the tests must run as root (they create network namespaces, veths and bridges)');
for (const [tool, pkg] of [['ip', 'iproute2'], ['nsenter', 'util-linux'], ['ping', 'iputils-ping'], ['iptables', 'iptables'], ['ip6tables', 'iptables'], ['containerd', 'containerd'], ['ctr', 'containerd'], ['runc', 'runc'], ['busybox', 'busybox-static'], ['gcc', 'gcc'], ['pkill', 'procps'], ['curl', 'curl'], ['ethtool', 'ethtool'], ['chroot', 'coreutils']]) {
  try {
    execFileSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' });
  } catch {
    problems.push(`${tool} is missing: install the Debian package ${pkg} (hack/setup.sh does)`);
  }
}
if (!existsSync('/usr/lib/cni/loopback')) problems.push('/usr/lib/cni/loopback is missing: install the Debian package containernetworking-plugins');
if (problems.length) {
  process.stderr.write(`\nkni tests cannot run:\n${problems.map((p) => `  - ${p}`).join('\n')}\n\n`);
  process.exit(1);
}

// The suite takes /run/netns's self-mount back down when it made it (bench/run-netns-mount.ts).
const releaseRunNetns = guardRunNetnsMount();
export const mochaHooks = { afterAll: releaseRunNetns };
