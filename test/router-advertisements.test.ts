// IPv6 forwarding, which a dual-stack kni turns on, makes a link with accept_ra 1 ignore router
// advertisements: a node whose IPv6 default route comes from one would lose it. kni sets those
// links' accept_ra to 2 and leaves the others alone (plugin/node/node-network.ts).
import assert from 'node:assert/strict';
import { inNetns, sh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

describe('router advertisements with IPv6 forwarding on (real kernel)', () => {
  it('a link whose IPv6 default route came from a router advertisement keeps taking them (accept_ra 2); a link with a static default route is left as it was', async () => {
    const setup = (ns: string) => {
      for (const [link, addr] of [['up0', '2001:db8:1::5/64'], ['up1', '2001:db8:2::5/64']]) {
        sh('ip', ['-n', ns, 'link', 'add', link, 'type', 'veth', 'peer', 'name', `${link}p`]);
        sh('ip', ['-n', ns, 'link', 'set', `${link}p`, 'up']);
        sh('ip', ['netns', 'exec', ns, 'sysctl', '-qw', `net.ipv6.conf.${link}.accept_ra=1`]);
        sh('ip', ['-n', ns, 'link', 'set', link, 'up']);
        sh('ip', ['-n', ns, '-6', 'addr', 'add', addr, 'dev', link, 'nodad']);
      }
      sh('ip', ['-n', ns, '-6', 'route', 'add', 'default', 'via', 'fe80::1', 'dev', 'up0', 'proto', 'ra']);
      sh('ip', ['-n', ns, '-6', 'route', 'add', 'default', 'via', 'fe80::2', 'dev', 'up1', 'metric', '2048']);
    };
    const d = await TestDaemon.start({ ranges: ['10.81.0.0/24', 'fd00:81::/64'] }, { beforeLaunch: setup });
    try {
      const sysctl = (key: string) => inNetns(d.nodeNetns, 'cat', [`/proc/sys/net/ipv6/conf/${key}`]).out.trim();
      assert.equal(sysctl('all/forwarding'), '1');
      assert.equal(sysctl('up0/accept_ra'), '2');
      assert.equal(sysctl('up1/accept_ra'), '1');
      const line = d.output.split('\n').filter((l) => l.includes('accept_ra of up0')).map((l) => JSON.parse(l))[0];
      assert.equal(line?.level, 'info');
      assert.equal(line.link, 'up0');
      assert.ok(!d.output.includes('accept_ra of up1'));
    } finally {
      d.cleanup();
    }
  });
});
