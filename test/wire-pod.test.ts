// The pod wiring (plugin/pod/pod-wiring.ts): what it makes, and its failures as the errors the
// wiring's callers tell apart, on the real kernel in throwaway netns. The bytes of its requests
// are pinned by test/netlink-messages.test.ts.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { linkByName } from '../plugin/netlink/link';
import { NetlinkError, NetlinkSocket } from '../plugin/netlink/socket';
import { NotANetnsError } from '../plugin/netns/netns';
import { HostVethExistsError, PodInterfaceExistsError, wirePod } from '../plugin/pod/pod-wiring';
import type { InterfaceRecord } from '../plugin/store/records';
import { netlinkIn } from './helpers/netlink-in';
import { RUN, inNetns, sh, trySh } from './helpers/sh';

describe('pod wiring', () => {
  describe('on the real kernel', () => {
    const node = `${RUN}-wn`;
    const pod = `${RUN}-wp`;
    let host: NetlinkSocket;
    let podFd: number;
    const itf = (over: Partial<InterfaceRecord> = {}): InterfaceRecord => ({
      name: 'eth0', hostVeth: `${RUN}w0`.slice(0, 15), mac: '0a:58:0a:80:03:07', mtu: 1500, routed: true,
      addresses: [
        { family: 4, address: '10.128.3.7', prefixLength: 32, gateway: '10.128.0.1', range: '10.128.0.0/16' },
        { family: 6, address: 'fd00:128::3:7', prefixLength: 128, gateway: 'fd00:128::1', range: 'fd00:128::/64' },
      ],
      ...over,
    });

    beforeEach(() => {
      sh('ip', ['netns', 'add', node]);
      sh('ip', ['netns', 'add', pod]);
      host = netlinkIn(`/run/netns/${node}`);
      podFd = fs.openSync(`/run/netns/${pod}`, 'r');
    });
    afterEach(() => {
      host?.close();
      fs.closeSync(podFd);
      trySh('ip', ['netns', 'del', node]);
      trySh('ip', ['netns', 'del', pod]);
    });

    it('wires a routed dual-stack pod: the host end named, aliased and routed, the pod end addressed', () => {
      const i = itf();
      wirePod(host, 0, podFd, i, 'sb-1');
      const hostEnd = linkByName(host, i.hostVeth)!;
      assert.equal(hostEnd.alias, 'kni:sb-1');
      assert.equal(hostEnd.mac, 'ee:ee:ee:ee:ee:ee');
      assert.match(sh('ip', ['-n', node, 'route', 'show', 'dev', i.hostVeth]), /10\.128\.3\.7 .*scope link/);
      assert.match(sh('ip', ['-n', node, '-6', 'route', 'show', 'dev', i.hostVeth]), /fd00:128::3:7/);
      const addrs = inNetns(`/run/netns/${pod}`, 'ip', ['-o', 'addr', 'show', 'dev', 'eth0']).out;
      assert.match(addrs, /inet 10\.128\.3\.7\/32/);
      assert.match(addrs, /inet6 fd00:128::3:7\/128/);
      assert.doesNotMatch(addrs, /fe80/, 'the pod end has an IPv6 link-local address');
      assert.match(inNetns(`/run/netns/${pod}`, 'ip', ['route', 'show', 'default']).out, /via 10\.128\.0\.1 dev eth0/);
      assert.match(inNetns(`/run/netns/${pod}`, 'ip', ['-6', 'route', 'show', 'default']).out, /via fd00:128::1 dev eth0/);
    });

    it('refuses a file that is no netns before any change', () => {
      const fd = fs.openSync('/proc/self/status', 'r');
      try {
        assert.throws(() => wirePod(host, 0, fd, itf(), 'sb-2'), NotANetnsError);
      } finally {
        fs.closeSync(fd);
      }
      assert.equal(linkByName(host, itf().hostVeth), undefined);
    });

    it('tells a stale host end from a pod interface already there', () => {
      wirePod(host, 0, podFd, itf(), 'sb-3');
      assert.throws(() => wirePod(host, 0, podFd, itf(), 'sb-3'), HostVethExistsError);
      assert.throws(() => wirePod(host, 0, podFd, itf({ hostVeth: `${RUN}w1`.slice(0, 15) }), 'sb-4'), PodInterfaceExistsError);
    });

    it('names the request the kernel refused, with the kernel\'s own words', () => {
      sh('ip', ['netns', 'exec', pod, 'sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1', 'net.ipv6.conf.default.disable_ipv6=1']);
      let err: unknown;
      try {
        wirePod(host, 0, podFd, itf(), 'sb-5');
      } catch (e) {
        err = e;
      }
      assert.ok(err instanceof NetlinkError, `expected a NetlinkError, got ${String(err)}`);
      // The pod end's fifth request (after link-local off, lo up, eth0 up and the IPv4 address).
      assert.equal(err.message, 'add address fd00:128::3:7/128 to eth0: EACCES (ipv6: IPv6 is disabled on this device)');
    });
  });
});
