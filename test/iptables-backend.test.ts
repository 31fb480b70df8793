// Which iptables backend kni writes with where both exist (kni's image, Debian): the one the
// node's kubelet uses, found as kube-proxy's iptables-wrapper finds it (plugin/node/iptables.ts).
// Each case a daemon in its own node netns; the kubelet's hint chain made there by hand.
import assert from 'node:assert/strict';
import { inNetns, sh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

const hint = (backend: 'nft' | 'legacy') => (ns: string) => sh('ip', ['netns', 'exec', ns, `iptables-${backend}`, '-t', 'mangle', '-N', 'KUBE-IPTABLES-HINT']);
const forward = (d: TestDaemon, tool: string) => inNetns(d.nodeNetns, tool, ['-t', 'filter', '-S', 'FORWARD']).out;
const chosen = (d: TestDaemon) => d.output.split('\n').filter((l) => l.includes('"msg":"iptables backend chosen"')).map((l) => JSON.parse(l));

describe('the iptables backend kni writes with (real kernel, both backends)', () => {
  const cases: { name: string; before?: (ns: string) => void; env?: Record<string, string>; want: 'nft' | 'legacy'; why: RegExp }[] = [
    { name: "the kubelet's hint chain in legacy: legacy", before: hint('legacy'), want: 'legacy', why: /hint chain is in legacy/ },
    { name: "the kubelet's hint chain in nft: nft", before: hint('nft'), want: 'nft', why: /hint chain is in nft/ },
    { name: 'no hint, more rules in legacy: legacy', before: (ns) => sh('ip', ['netns', 'exec', ns, 'iptables-legacy', '-t', 'filter', '-A', 'INPUT', '-s', '192.0.2.1', '-j', 'ACCEPT']), want: 'legacy', why: /legacy holds 1 rule, nft 0/ },
    { name: 'nothing anywhere: nft', want: 'nft', why: /nft holds 0 rules, legacy 0/ },
    { name: 'KNI_IPTABLES_MODE=legacy over an nft hint', before: hint('nft'), env: { KNI_IPTABLES_MODE: 'legacy' }, want: 'legacy', why: /^$/ },
    { name: 'KNI_IPTABLES_MODE with a typo: a warning, and the node\'s backend found as if unset', before: hint('legacy'), env: { KNI_IPTABLES_MODE: 'legcy' }, want: 'legacy', why: /hint chain is in legacy/ },
  ];
  for (const c of cases) {
    it(c.name, async () => {
      const d = await TestDaemon.start({ ranges: ['10.79.0.0/24', 'fd00:79::/64'] }, { beforeLaunch: c.before, env: c.env });
      try {
        const other = c.want === 'nft' ? 'legacy' : 'nft';
        for (const t of ['iptables', 'ip6tables']) {
          assert.match(forward(d, `${t}-${c.want}`), /-j KNI-FWD/, `${t}-${c.want} has no forwarding jump`);
          assert.doesNotMatch(forward(d, `${t}-${other}`), /KNI-FWD/, `${t}-${other} has kni's rules too`);
        }
        const lines = chosen(d);
        const typo = c.env?.KNI_IPTABLES_MODE === 'legcy';
        if (typo) assert.match(d.output, /KNI_IPTABLES_MODE \\"legcy\\" is not nft or legacy: kni finds the node's backend itself/);
        if (c.env && !typo) assert.equal(lines.length, 0, 'chosen by the environment: nothing to log');
        else {
          assert.equal(lines.length, 1);
          assert.equal(lines[0].backend, c.want);
          assert.match(lines[0].why, c.why);
        }
      } finally {
        d.cleanup();
      }
    });
  }
});
