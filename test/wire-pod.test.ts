// The native pod wiring (plugin/pod/wire-pod.c): the bytes it sends are the TypeScript
// builders' (which test/netlink-messages.test.ts pins), and its failures come back as the
// errors the wiring's callers tell apart, on the real kernel in throwaway netns.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import fc from 'fast-check';
import { formatIp } from '../plugin/ipam/ip';
import { linkByName } from '../plugin/netlink/link';
import { NetlinkError, NetlinkSocket } from '../plugin/netlink/socket';
import { NotANetnsError } from '../plugin/netns/netns';
import { HostVethExistsError, PodInterfaceExistsError, wirePod, wireRequests, wireSpec } from '../plugin/pod/pod-wiring';
import { wireRequestsNative } from '../plugin/pod/wire-pod-native';
import type { InterfaceRecord } from '../plugin/store/records';
import { netlinkIn } from './helpers/netlink-in';
import { RUN, inNetns, sh, trySh } from './helpers/sh';

const NLM_F_REQUEST = 1;
const NLM_F_ACK = 4;
const NLM_F_ECHO = 8;

const hex = (n: number) => fc.array(fc.integer({ min: 0, max: 255 }), { minLength: n, maxLength: n }).map((bs) => bs.map((b) => b.toString(16).padStart(2, '0')).join(':'));
const address = (family: 4 | 6) => fc.bigInt({ min: 1n, max: family === 4 ? 2n ** 32n - 1n : 2n ** 128n - 1n }).map((v) => formatIp(family, v));

const interfaceArb = fc.record({
  routed: fc.boolean(),
  name: fc.stringMatching(/^[a-z][a-z0-9]{0,14}$/),
  hostVeth: fc.stringMatching(/^kni[0-9a-f]{12}$/),
  mac: hex(6),
  mtu: fc.integer({ min: 68, max: 65535 }),
  families: fc.constantFrom<(4 | 6)[]>([4], [6], [4, 6], [6, 4], [4, 4, 6]),
}).chain((r) => fc.tuple(fc.constant(r), fc.tuple(...r.families.map((f) => fc.tuple(fc.constant(f), address(f), address(f), fc.integer({ min: 0, max: f === 4 ? 32 : 128 })))) as fc.Arbitrary<[4 | 6, string, string, number][]>));

describe('native pod wiring', () => {
  it('sends exactly the requests the TypeScript builders make, in the same three writes', () => {
    fc.assert(
      fc.property(interfaceArb, fc.stringMatching(/^[a-z0-9][a-z0-9._-]{0,127}$/), fc.integer({ min: 1, max: 2 ** 31 - 1 }), fc.integer({ min: 1, max: 2 ** 31 - 1 }), fc.integer({ min: 0, max: 1 << 20 }), fc.integer({ min: 1, max: 1 << 20 }),
        ([r, addrs], sandbox, hostIndex, podIndex, netnsFd, bridge) => {
          const itf: InterfaceRecord = {
            name: r.name, hostVeth: r.hostVeth, mac: r.mac, mtu: r.mtu, routed: r.routed,
            addresses: addrs.map(([family, a, gw, prefix]) => ({ family, address: a, prefixLength: prefix, gateway: gw, range: '' })),
          };
          const want = wireRequests(itf, bridge, netnsFd, sandbox, hostIndex, podIndex);
          const got = wireRequestsNative(netnsFd, wireSpec(itf, bridge, sandbox), hostIndex, podIndex);
          let o = 0;
          want.forEach((write, w) => write.forEach((req, i) => {
            const len = got.readUInt32LE(o);
            assert.equal(got.readUInt16LE(o + 4), req.type, req.what);
            const ack = i === write.length - 1 ? NLM_F_ACK : 0;
            assert.equal(got.readUInt16LE(o + 6), NLM_F_REQUEST | ack | req.flags | (w === 0 ? NLM_F_ECHO : 0), req.what);
            assert.equal(got.subarray(o + 16, o + len).toString('hex'), req.body.toString('hex'), req.what);
            o += (len + 3) & ~3;
          }));
          assert.equal(o, got.length, 'the native wiring sends more than the builders make');
        }),
      { numRuns: 300 },
    );
  });

  it('takes a MAC only as six two-digit hex octets', () => {
    const spec = (podMac: string) => wireSpec({ name: 'eth0', hostVeth: 'kni0123456789ab', mac: podMac, mtu: 1500, routed: true, addresses: [] }, 0, 'sb');
    assert.ok(wireRequestsNative(0, spec('0A:58:0a:fF:00:07'), 1, 2).length > 0);
    for (const bad of ['', '0a:58:0a:ff:00', '0a:58:0a:ff:00:07:', '0a:58:0a:ff:00:7', '0a:58:0a:ff:00:0g', '0a-58-0a-ff-00-07', ' 0a:58:0a:ff:00:07', '0x:58:0a:ff:00:07']) {
      assert.throws(() => wireRequestsNative(0, spec(bad), 1, 2), /refused/, JSON.stringify(bad));
    }
  });

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
