// Pure logic: address arithmetic, config validation, the range allocator.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ConfigError, parseConfig } from '../plugin/core/config';
import { KniError } from '../plugin/core/errors';
import * as validate from '../plugin/core/validate';
import fc from 'fast-check';
import { align4 } from '../plugin/netlink/attr';
import { BodyWriter, bodyWriter } from '../plugin/netlink/body-writer';
import { addrAdd } from '../plugin/netlink/addr';
import { linkSetAlias, linkSetGroup, linkSetHairpin, linkSetNoLinkLocal, linkSetUp, linkSetUpByIndex, parseLink, vethAdd } from '../plugin/netlink/link';
import { neighSet } from '../plugin/netlink/neigh';
import { defaultRouteAdd, hostRouteAdd } from '../plugin/netlink/route';
import type { NetlinkRequest } from '../plugin/netlink/socket';
import { formatIp, formatNewIp, ipBytes, parseCidr, parseIp } from '../plugin/ipam/ip';
import { RangeAllocator } from '../plugin/ipam/range-allocator';
import { cniIpamStatus } from '../plugin/cni/cni-ipam-status';
import { parseNetworkConfig } from '../plugin/cni/conflist';
import { log } from '../plugin/core/log';
import { hostVethName } from '../plugin/core/runtime-types';
import { podMac } from '../plugin/pod/pod-wiring';
import * as libc from '../plugin/sys/libc';

describe('ip', () => {
  it('round-trips IPv4 and IPv6 in canonical form', () => {
    for (const s of ['10.244.0.1', '0.0.0.0', '255.255.255.255', 'fd00:10:244::1', '::', '::1', '2001:db8::', '1:0:0:1:0:0:0:1', '1:2:3:4:5:6:7:8']) {
      const { family, value } = parseIp(s);
      assert.equal(formatIp(family, value), s === '1:0:0:1:0:0:0:1' ? '1:0:0:1::1' : s);
    }
  });

  it('formats every address as the WHATWG URL parser canonicalises it (RFC 5952 for IPv6)', () => {
    const full = (v: bigint): string => Array.from({ length: 8 }, (_, i) => ((v >> BigInt(112 - 16 * i)) & 0xffffn).toString(16)).join(':');
    const zeroRuns = fc.array(fc.constantFrom<bigint>(0n, 0n, 0n, 1n, 0xffffn, 0xabcn), { minLength: 8, maxLength: 8 }).map((g) => g.reduce((a, x) => (a << 16n) | x, 0n));
    fc.assert(fc.property(fc.oneof(fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }), zeroRuns), (v) => formatIp(6, v) === new URL(`http://[${full(v)}]/`).hostname.slice(1, -1)));
    fc.assert(fc.property(fc.bigInt({ min: 0n, max: (1n << 32n) - 1n }), (v) => formatIp(4, v) === new URL(`http://${v}/`).hostname));
  });

  it('an address formatted as allocated parses back to its value, from the parse cache as from the text', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }), fc.boolean(), (v, v4) => {
        const family = v4 ? 4 : 6;
        const value = v4 ? v & 0xffffffffn : v;
        const text = formatNewIp(family, value);
        assert.equal(text, formatIp(family, value));
        assert.deepEqual(parseIp(text), { family, value });
      }),
    );
  });
  it('encodes addresses in network byte order, the same bytes as a byte-at-a-time reference', () => {
    const reference = (family: 4 | 6, v: bigint): Buffer => {
      const b = Buffer.alloc(family === 4 ? 4 : 16);
      for (let i = b.length - 1; i >= 0; i--, v >>= 8n) b[i] = Number(v & 0xffn);
      return b;
    };
    assert.deepEqual([...ipBytes(4, parseIp('10.128.3.17').value)], [10, 128, 3, 17]);
    assert.equal(ipBytes(6, parseIp('fd00:128::3:17').value).toString('hex'), 'fd000128000000000000000000030017');
    fc.assert(fc.property(fc.bigInt({ min: 0n, max: (1n << 32n) - 1n }), (v) => ipBytes(4, v).equals(reference(4, v))));
    fc.assert(fc.property(fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }), (v) => ipBytes(6, v).equals(reference(6, v))));
  });
  it('canonicalises CIDRs and rejects bad ones', () => {
    assert.equal(parseCidr('10.244.0.7/24').text, '10.244.0.0/24');
    assert.equal(parseCidr('FD00:10:244:0::5/64').text, 'fd00:10:244::/64');
    for (const bad of ['10.0.0.0/33', '10.0.0.0', '10.0.0.256/24', 'fd00::/129', 'x/8', '10.0.0.0/-1', '']) {
      assert.throws(() => parseCidr(bad), /CIDR|prefix|address/, bad);
    }
  });
});

describe('netlink attributes', () => {
  it('are padded with zeros, never with what was in a buffer before', () => {
    for (let i = 0; i < 64; i++) Buffer.allocUnsafe(64).fill(0xff); // leave garbage in Node's pool
    const one = (write: (w: BodyWriter) => void): string => {
      bodyWriter().struct(64); // and in the scratch buffer
      const w = bodyWriter();
      write(w);
      return w.take().toString('hex');
    };
    assert.equal(one((w) => w.u8(3, 7)), '0500030007000000');
    assert.equal(one((w) => w.u32(4, 0x01020304)), '0800040004030201');
    assert.equal(one((w) => w.string(3, 'eth0')), '0900030065746830' + '00000000');
    assert.equal(one((w) => w.string(1, 'abcd1234')), '0d000100' + Buffer.from('abcd1234').toString('hex') + '00000000');
    assert.equal(one((w) => w.bytes(8, Buffer.from([1, 2, 3]))), '0700080001020300');
    assert.equal(one((w) => w.mac(1, '0a:58:0A:80:3:07')), '0a0001000a580a800307' + '0000');
    assert.equal(one((w) => w.ip(1, 6, parseIp('fd00::1').value)), '14000100fd000000000000000000000000000001');
    assert.equal(one((w) => w.struct(5)), '0000000000');
    assert.equal(
      one((w) => {
        const nest = w.begin(18);
        w.u8(1, 1);
        w.string(2, 'x');
        w.end(nest);
      }),
      '1400128005000100010000000600020078000000',
    );
  });

  it('a body larger than the scratch buffer is written whole', () => {
    const w = bodyWriter();
    const long = 'x'.repeat(40_000);
    w.struct(16);
    w.string(20, long);
    w.u32(4, 9);
    const b = w.take();
    assert.equal(b.length, 16 + align4(4 + long.length + 1) + 8);
    assert.equal(b.toString('utf8', 20, 20 + long.length), long);
    assert.equal(b.readUInt32LE(b.length - 4), 9);
  });

  it('the requests of an attach and a detach keep their bytes (the kernel floor mirrors them)', () => {
    // Pinned bytes: bench/kernel-floor.c mirrors these messages, and a builder's rewrite must not change them.
    for (let i = 0; i < 64; i++) Buffer.allocUnsafe(64).fill(0xff); // leave garbage in Node's pool
    const v4 = parseIp('10.128.3.7');
    const v6 = parseIp('fd00:128::3:7');
    const built: Record<string, NetlinkRequest> = {
      vethRouted: vethAdd({ name: 'kni49075c1f2373', mac: 'ee:ee:ee:ee:ee:ee', mtu: 1500, master: 0, peer: { name: 'eth0', mac: '0a:58:0a:80:03:07', netnsFd: 23 } }),
      vethBridge: vethAdd({ name: 'kni0123456789ab', mtu: 1450, master: 5, peer: { name: 'net1', mac: '0a:58:0a:80:03:07', netnsFd: 7 } }),
      noLinkLocal: linkSetNoLinkLocal(42, 'eth0'),
      hairpin: linkSetHairpin(42, 'x'),
      alias: linkSetAlias(42, 'x', 'kni:abcdef0123'),
      upByIndex: linkSetUpByIndex(42, 'x'),
      upLo: linkSetUp('lo'),
      group: linkSetGroup('kni49075c1f2373', 0x6b6e69, 'kni-released:abc'),
      addr4: addrAdd(3, 'eth0', { ...v4, prefixLength: 32 }),
      addr6: addrAdd(3, 'eth0', { ...v6, prefixLength: 128 }, true),
      neigh4: neighSet({ family: 4, index: 3, ip: '10.128.0.1', mac: 'ee:ee:ee:ee:ee:ee' }),
      neigh6: neighSet({ family: 6, index: 3, ip: 'fd00:128::1', mac: '0a:58:0a:80:03:07' }),
      host4: hostRouteAdd(4, v4.value, 9, 'x'),
      host6: hostRouteAdd(6, v6.value, 9, 'x'),
      def4: defaultRouteAdd(4, parseIp('10.128.0.1').value, 3, 'eth0'),
      def6: defaultRouteAdd(6, parseIp('fd00:128::1').value, 3, 'eth0', 'fd00:128::1'),
    };
    const want: Record<string, [number, number, string, string]> = {
      vethRouted: [16, 1536, 'add veth kni49075c1f2373/eth0', '00000000000000000000000000000000140003006b6e69343930373563316632333733000a000100eeeeeeeeeeee000008000400dc05000008001f0001000000080020000100000060001280090001007665746800000000500002804c0001000000000000000000000000000000000009000300657468300000000008000400dc0500000a0001000a580a800307000008001c001700000008001f00010000000800200001000000'],
      vethBridge: [16, 1536, 'add veth kni0123456789ab/net1', '00000000000000000000000000000000140003006b6e693031323334353637383961620008000400aa05000008000a000500000008001f0001000000080020000100000060001280090001007665746800000000500002804c00010000000000000000000000000000000000090003006e6574310000000008000400aa0500000a0001000a580a800307000008001c000700000008001f00010000000800200001000000'],
      noLinkLocal: [16, 0, 'turn off IPv6 link-local on eth0', '000000002a000000000000000000000010001a800c000a800500080001000000'],
      hairpin: [19, 0, 'set hairpin on x', '070000002a00000000000000000000000c000c800500040001000000'],
      alias: [16, 0, 'set alias of x', '000000002a0000000000000000000000130014006b6e693a616263646566303132330000'],
      upByIndex: [16, 0, 'set x up', '000000002a0000000100000001000000'],
      upLo: [16, 0, 'set lo up', '00000000000000000100000001000000070003006c6f0000'],
      group: [16, 0, 'move kni49075c1f2373 to group 7040617', '00000000000000000000000000000000140003006b6e693439303735633166323337330008001b00696e6b00150014006b6e692d72656c65617365643a61626300000000'],
      addr4: [20, 1536, 'add address 10.128.3.7/32 to eth0', '0220000003000000080002000a800307080001000a8003070800080080000000'],
      addr6: [20, 1280, 'add address fd00:128::3:7/128 to eth0', '0a8000000300000014000200fd00012800000000000000000003000714000100fd0001280000000000000000000300070800080082000000'],
      neigh4: [28, 1280, 'set neighbour 10.128.0.1 lladdr ee:ee:ee:ee:ee:ee (link 3)', '0200000003000000800000000a000200eeeeeeeeeeee0000080001000a800001'],
      neigh6: [28, 1280, 'set neighbour fd00:128::1 lladdr 0a:58:0a:80:03:07 (link 3)', '0a00000003000000800000000a0002000a580a800307000014000100fd000128000000000000000000000001'],
      host4: [24, 1280, 'add route 10.128.3.7/32 dev x', '02200000fe03fd0100000000080001000a8003070800040009000000'],
      host6: [24, 1280, 'add route fd00:128::3:7/128 dev x', '0a800000fe03fd010000000014000100fd0001280000000000000000000300070800040009000000'],
      def4: [24, 1280, 'add default route via 10.128.0.1 dev eth0', '02000000fe03000100000000080005000a8000010800040003000000'],
      def6: [24, 1280, 'add default route via fd00:128::1 dev eth0', '0a000000fe0300010000000014000500fd0001280000000000000000000000010800040003000000'],
    };
    for (const [k, r] of Object.entries(built)) assert.deepEqual([r.type, r.flags, r.what, r.body.toString('hex')], want[k], k);
  });

  it('a link message parses to its fields, whatever other attributes come around them', () => {
    const link = (write: (w: BodyWriter) => void): Buffer => {
      const w = bodyWriter();
      const at = w.struct(16); // struct ifinfomsg
      w.i32At(at + 4, 42);
      w.u32At(at + 8, 0x1003);
      write(w);
      return w.take();
    };
    const body = link((w) => {
      w.u32(13, 7); // IFLA_TXQLEN: not a Link field
      w.string(3, 'knia1b2c3d4e5f6');
      w.u32(4, 1450);
      w.bytes(1, Buffer.from([0xee, 0xee, 0xee, 0xee, 0xee, 0xee]));
      w.u32(10, 3);
      const spec = w.begin(26); // IFLA_AF_SPEC: skipped whole
      const inet6 = w.begin(10);
      w.u8(8, 1);
      w.end(inet6);
      w.end(spec);
      w.string(20, 'kni:sandbox-1');
      w.u32(5, 9);
      w.bytes(37, Buffer.from([5, 0, 0, 0]));
      const info = w.begin(18);
      w.string(1, 'veth');
      const data = w.begin(2);
      w.u32(1, 1);
      w.end(data);
      w.end(info);
      w.string(3, 'knia1b2c3d4e5f7'); // a repeated attribute: the last one wins, as in the kernel
    });
    assert.deepEqual(parseLink(body), { index: 42, flags: 0x1003, name: 'knia1b2c3d4e5f7', mtu: 1450, mac: 'ee:ee:ee:ee:ee:ee', master: 3, kind: 'veth', alias: 'kni:sandbox-1', peerIndex: 9, peerNetnsId: 5 });
    assert.deepEqual(parseLink(link((w) => w.string(3, 'lo'))), { index: 42, flags: 0x1003, name: 'lo', mtu: 0, mac: '', master: 0, kind: '', alias: '', peerIndex: 0, peerNetnsId: -1 });
    assert.equal(parseLink(link((w) => w.bytes(1, Buffer.from([0x0a, 0x58, 0, 1, 0x0f, 0x10])))).mac, '0a:58:00:01:0f:10');
  });
});

describe('config', () => {
  it('has the embedded default', () => {
    const c = parseConfig(undefined);
    assert.equal(c.bridge, 'kni0');
    assert.equal(c.mtu, 1500);
    assert.deepEqual(c.ranges.map((r) => r.text), ['10.244.0.0/24', 'fd00:10:244::/64']);
    assert.equal(c.netnsDir, '/run/netns');
    assert.equal(c.netnsPoolSize, 4);
  });
  const cases: [string, unknown, RegExp][] = [
    ['bad CIDR', { ranges: ['10.0.0.0/33'] }, /prefix length 33/],
    ['garbage CIDR', { ranges: ['ten'] }, /not a CIDR/],
    ['two IPv4 ranges', { ranges: ['10.0.0.0/24', '10.1.0.0/24'] }, /at most one per family/],
    ['too small', { ranges: ['10.0.0.0/31'] }, /too small/],
    ['no ranges', { ranges: [] }, /one or two CIDRs/],
    ['MTU', { mtu: 70000 }, /mtu 70000/],
    ['IPv6 MTU', { mtu: 1000 }, /1280/],
    ['bridge name', { bridge: 'this-name-is-too-long' }, /at most 15/],
    ['pod link', { podLink: 'ptp' }, /podLink "ptp" is not "auto", "bridge" or "routed"/],
    ['unknown key', { brige: 'x' }, /unknown setting "brige"/],
    ['relative netnsDir', { netnsDir: 'netns' }, /absolute/],
    ['netns pool size', { netnsPoolSize: 65 }, /netnsPoolSize must be a whole number from 0 to 64/],
    ['netns pool size, not a number', { netnsPoolSize: '4' }, /netnsPoolSize must be a whole number from 0 to 64/],
    ['backend', { backend: 'ipip' }, /backend must be auto, host-gw, vxlan or none/],
    ['vxlan vni', { vxlan: { vni: 0 } }, /vxlan\.vni/],
    ['vxlan key', { vxlan: { id: 3 } }, /unknown setting "vxlan\.id"/],
    ['node name', { kubernetes: { nodeName: 'Not A Name' } }, /kubernetes\.nodeName/],
    ['configMap', { kubernetes: { configMap: 'no-namespace' } }, /"namespace\/name"/],
    ['kubeconfig', { kubernetes: { kubeconfig: 'relative' } }, /kubernetes\.kubeconfig must be an absolute path/],
    ['log level', { logLevel: 'loud' }, /logLevel must be one of/],
  ];
  for (const [name, raw, re] of cases) {
    it(`refuses ${name}`, () => assert.throws(() => parseConfig(raw), (e: Error) => e instanceof ConfigError && re.test(e.message)));
  }
  it('takes the pod ranges from the Node when a node name is set and no ranges are given (KNI_NODE_NAME fills the name)', () => {
    const saved = process.env.KNI_NODE_NAME;
    try {
      delete process.env.KNI_NODE_NAME;
      assert.equal(parseConfig({}).rangesFromNode, false);
      const c = parseConfig({ kubernetes: { nodeName: 'node-a' } });
      assert.equal(c.rangesFromNode, true);
      assert.deepEqual(c.ranges, []);
      assert.equal(parseConfig({ kubernetes: { nodeName: 'node-a' }, ranges: ['10.9.0.0/24'] }).rangesFromNode, false, 'static ranges win');
      process.env.KNI_NODE_NAME = 'from-env';
      assert.equal(parseConfig({}).kubernetes.nodeName, 'from-env');
      process.env.KNI_NODE_NAME = 'Bad_Name';
      assert.throws(() => parseConfig({}), /KNI_NODE_NAME "Bad_Name" is not a Node name/);
    } finally {
      if (saved === undefined) delete process.env.KNI_NODE_NAME;
      else process.env.KNI_NODE_NAME = saved;
    }
  });
  it('tells a live change from one that needs a restart', async () => {
    const { diffConfig } = await import('../plugin/kube/config-watch');
    const cur = parseConfig({ kubernetes: { nodeName: 'n' } });
    cur.ranges = [parseCidr('10.244.1.0/24')]; // adopted from the Node: not a change
    assert.deepEqual(diffConfig(cur, parseConfig({ kubernetes: { nodeName: 'n' }, logLevel: 'debug', backend: 'vxlan', masquerade: false })), { live: ['logLevel', 'backend', 'masquerade'], fixed: [] });
    assert.deepEqual(diffConfig(cur, parseConfig({ kubernetes: { nodeName: 'n' }, bridge: 'br9', mtu: 1400 })), { live: [], fixed: ['bridge', 'mtu'] });
    assert.deepEqual(diffConfig(cur, parseConfig({ kubernetes: { nodeName: 'n' }, ranges: ['10.9.0.0/24'] })).fixed, ['ranges', 'rangesFromNode']);
  });
  it('names every problem at once', () => {
    assert.throws(() => parseConfig({ mtu: 1, ranges: ['x'] }), /mtu 1.*not a CIDR|not a CIDR.*mtu 1/);
  });
});

describe('validation', () => {
  const bad = (fn: () => unknown, re: RegExp) =>
    assert.throws(fn, (e: Error) => e instanceof KniError && e.code === 'INVALID_ARGUMENT' && re.test(e.message));
  it('sandbox ids', () => {
    assert.equal(validate.sandboxId('a'.repeat(64)), 'a'.repeat(64));
    bad(() => validate.sandboxId(''), /empty/);
    bad(() => validate.sandboxId('a'.repeat(129)), /129 characters/);
    bad(() => validate.sandboxId('a/b'), /characters/);
    bad(() => validate.sandboxId('..'), /characters/);
  });
  it('interface names', () => {
    assert.equal(validate.interfaceName('eth0'), 'eth0');
    bad(() => validate.interfaceName('a'.repeat(16)), /16 bytes/);
    bad(() => validate.interfaceName('ééééééééé'), /18 bytes/);
    for (const n of ['a/b', 'a:b', 'a b', '..', '.']) bad(() => validate.interfaceName(n), /not a valid interface name/);
  });
  it('netns paths: the form only (where one leads is checked on the opened file)', () => {
    bad(() => validate.netnsPath('run/netns/x'), /not absolute/);
    bad(() => validate.netnsPath('/run/netns/../../etc/passwd'), /not normalised/);
    bad(() => validate.netnsPath('/run/netns/x/'), /not normalised/);
    bad(() => validate.netnsPath('/run/netns/a\0b'), /not a valid path/);
    assert.equal(validate.netnsPath(`/proc/${process.pid}/ns/net`), `/proc/${process.pid}/ns/net`);
  });
});

describe('log lines', () => {
  const lines = (fn: () => void): Record<string, unknown>[] => {
    const out: string[] = [];
    const write = process.stdout.write;
    process.stdout.write = ((chunk: string) => out.push(chunk) > 0) as typeof process.stdout.write;
    try {
      fn();
    } finally {
      process.stdout.write = write;
    }
    return out.map((l) => JSON.parse(l) as Record<string, unknown>);
  };

  it('are one JSON object each, and what a caller sent is cut at 1024 characters wherever it sits', () => {
    const big = 'x'.repeat(5000);
    const [flat, nested, longMsg] = lines(() => {
      log('warn', 'attach failed', { sandbox: 'a', ms: 1.5, ok: true, error: big });
      log('warn', 'attach failed', { sandbox: 'a', detail: { error: big, list: [big] } });
      log('warn', big);
    });
    assert.equal(flat.msg, 'attach failed');
    assert.equal(flat.ms, 1.5);
    assert.equal(flat.ok, true);
    assert.equal(flat.error, `${'x'.repeat(1024)}… (5000 chars)`);
    assert.deepEqual(nested.detail, { error: `${'x'.repeat(1024)}… (5000 chars)`, list: [`${'x'.repeat(1024)}… (5000 chars)`] });
    assert.equal(longMsg.msg, `${'x'.repeat(1024)}… (5000 chars)`);
    const [short] = lines(() => log('info', 'attach', { sandbox: 's1', pod: 'ns/p', entry: 'kni', kind: 'container', ms: 0.912, missing: undefined, none: null }));
    assert.deepEqual(Object.keys(short), ['time', 'level', 'msg', 'sandbox', 'pod', 'entry', 'kind', 'ms', 'none']);
    assert.match(String(short.time), /^\d{4}-\d\d-\d\dT/);
  });
});

describe('libc file calls (the netns open)', () => {
  it('readlink, statx and O_PATH opens agree with Node\'s fs, and fail with the errno\'s name', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `kni-libc-${process.pid}-`));
    try {
      const file = path.join(dir, 'f');
      fs.writeFileSync(file, 'x');
      fs.symlinkSync('f', path.join(dir, 'l'));
      assert.equal(libc.readlink(path.join(dir, 'l')), 'f');
      const fd = libc.openPath(file);
      try {
        assert.equal(libc.readlink(`/proc/self/fd/${fd}`), fs.realpathSync(file));
        const id = libc.fileId(fd);
        assert.equal(id.ino, fs.statSync(file).ino);
        assert.deepEqual(libc.fileId(path.join(dir, 'l')), id, 'a path is followed');
        assert.equal(libc.fileId(dir).dev, id.dev);
        assert.notEqual(libc.fileId('/proc/self/ns/net').dev, id.dev, 'namespaces live on nsfs');
      } finally {
        libc.close(fd);
      }
      assert.throws(() => libc.openPath(path.join(dir, 'missing')), (e: libc.Errno) => e.code === 'ENOENT');
      assert.throws(() => libc.readlink(file), (e: libc.Errno) => e.code === 'EINVAL');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('names and MACs a pod is given', () => {
  it('host veth names are the first 12 hex digits of sha256("<sandbox>/<interface>"), as every kni before made them', () => {
    // A restart finds the host ends of running pods by these names: they must never change.
    assert.equal(hostVethName('a', 'eth0'), 'kni49075c1f2373');
    assert.equal(hostVethName('0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef', 'net1'), `kni${crypto.createHash('sha256').update('0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef/net1').digest('hex').slice(0, 12)}`);
  });

  it('a pod MAC is 0a:58 and its IPv4 address, else random', () => {
    assert.equal(podMac('10.1.0.5'), '0a:58:0a:01:00:05');
    assert.equal(podMac('192.168.255.16'), '0a:58:c0:a8:ff:10');
    assert.match(podMac(), /^0a:58(:[0-9a-f]{2}){4}$/);
  });
});

describe('range allocator', () => {
  it('skips network, gateway and broadcast, and runs out with a message naming the range', () => {
    const r = new RangeAllocator(parseCidr('10.99.0.0/29'));
    const got = [1, 2, 3, 4, 5].map((i) => r.format(r.allocate(`s${i}`)));
    assert.deepEqual(got, ['10.99.0.2', '10.99.0.3', '10.99.0.4', '10.99.0.5', '10.99.0.6']);
    assert.throws(() => r.allocate('s6'), (e: Error) => e instanceof KniError && e.code === 'RESOURCE_EXHAUSTED' && /10\.99\.0\.0\/29/.test(e.message));
    r.release('10.99.0.4', 's3');
    assert.equal(r.format(r.allocate('s7')), '10.99.0.4');
  });
  it('does not hand a just-released address out again at once', () => {
    const r = new RangeAllocator(parseCidr('10.99.0.0/24'));
    const a = r.allocate('a');
    r.release(r.format(a), 'a');
    assert.notEqual(r.allocate('b'), a);
  });
  it('refuses to restore an address owned by another sandbox', () => {
    const r = new RangeAllocator(parseCidr('10.99.0.0/24'));
    assert.equal(r.reserve('10.99.0.9', 'a'), true);
    assert.equal(r.reserve('10.99.0.9', 'b'), false);
    assert.equal(r.reserve('10.98.0.9', 'b'), false);
  });
});

describe('IPAM status of a CNI network', () => {
  it('counts host-local ranges (subnet, rangeStart/rangeEnd, the legacy form) and skips what it cannot count', () => {
    const list = parseNetworkConfig(JSON.stringify({
      cniVersion: '1.0.0', name: 'n',
      plugins: [
        { type: 'bridge', ipam: { type: 'host-local', ranges: [[{ subnet: '10.1.0.0/24' }, { subnet: '10.2.0.0/24', rangeStart: '10.2.0.10', rangeEnd: '10.2.0.11' }], [{ subnet: 'usePodCidr' }]] } },
        { type: 'macvlan', ipam: { type: 'host-local', subnet: 'fd00:9::/120' } },
        { type: 'ptp', ipam: { type: 'static' } },
      ],
    }), 't');
    const st = cniIpamStatus(list, ['10.1.0.2', '10.2.0.10', '10.2.0.11', '10.9.9.9', 'fd00:9::5']);
    assert.deepEqual(st.map((r) => [r.cidr, r.size, r.used, r.free, r.exhausted]), [
      ['10.1.0.0/24', 253n, 1, 252n, false],
      ['10.2.0.0/24', 2n, 2, 0n, true],
      ['fd00:9::/120', 254n, 1, 253n, false],
    ]);
  });
});

describe('shipped configs', () => {
  it('kind-config/kni-config.yaml and the DaemonSet ConfigMap parse with the real parser', async () => {
    const { loadConfig } = await import('../plugin/core/config');
    const YAML = (await import('yaml')).default;
    const fs = await import('node:fs');
    const path = await import('node:path');
    const { packageRoot } = await import('../plugin/server/protos');
    const cfg = loadConfig(path.join(packageRoot(), 'kind-config/kni-config.yaml'));
    assert.equal(cfg.nri.enabled, true);
    assert.equal(cfg.cni.confDir, '/etc/cni/net.d');
    const docs = YAML.parseAllDocuments(fs.readFileSync(path.join(packageRoot(), 'kind-config/kni-daemonset.yaml'), 'utf8')).map((d) => d.toJS());
    const cm = docs.find((d) => d.kind === 'ConfigMap');
    assert.equal(parseConfig(YAML.parse(cm.data['config.yaml'])).cri.socket, '/run/containerd/containerd.sock');
    // The DaemonSet's kni takes its ranges from its Node: the downward API names it.
    const ds = docs.find((d) => d.kind === 'DaemonSet');
    const env = ds.spec.template.spec.containers[0].env;
    assert.deepEqual(env.find((e: any) => e.name === 'KNI_NODE_NAME').valueFrom, { fieldRef: { fieldPath: 'spec.nodeName' } });
    assert.equal(ds.spec.template.spec.serviceAccountName, 'kni');
    const saved = process.env.KNI_NODE_NAME;
    process.env.KNI_NODE_NAME = 'some-node';
    try {
      const c = parseConfig(YAML.parse(cm.data['config.yaml']));
      assert.equal(c.rangesFromNode, true);
      assert.equal(c.kubernetes.configMap, `${cm.metadata.namespace}/${cm.metadata.name}`);
    } finally {
      if (saved === undefined) delete process.env.KNI_NODE_NAME;
      else process.env.KNI_NODE_NAME = saved;
    }
  });
  it('the example extension DaemonSet and kni share the extension socket dir and kni\'s socket', async () => {
    const YAML = (await import('yaml')).default;
    const fs = await import('node:fs');
    const path = await import('node:path');
    const { packageRoot } = await import('../plugin/server/protos');
    const load = (f: string) => YAML.parseAllDocuments(fs.readFileSync(path.join(packageRoot(), 'kind-config', f), 'utf8')).map((d) => d.toJS()).find((d) => d.kind === 'DaemonSet');
    const mounts = (ds: any) => new Map<string, string>(ds.spec.template.spec.containers[0].volumeMounts.map((m: any) => [m.mountPath, ds.spec.template.spec.volumes.find((v: any) => v.name === m.name).hostPath?.path ?? '']));
    const kni = mounts(load('kni-daemonset.yaml'));
    const ext = mounts(load('mesh-redirect-daemonset.yaml'));
    for (const p of ['/run/kni', '/run/kni-extensions']) assert.equal(kni.get(p), ext.get(p), p);
    const cmd: string[] = load('mesh-redirect-daemonset.yaml').spec.template.spec.containers[0].command;
    assert.ok(cmd[cmd.indexOf('--socket') + 1].startsWith('/run/kni-extensions/'));
  });
  it('kind-config/kind-cluster.yaml: several nodes, no default CNI, dual-stack pod subnet, NRI on', async () => {
    const YAML = (await import('yaml')).default;
    const fs = await import('node:fs');
    const path = await import('node:path');
    const { packageRoot } = await import('../plugin/server/protos');
    const k = YAML.parse(fs.readFileSync(path.join(packageRoot(), 'kind-config/kind-cluster.yaml'), 'utf8'));
    assert.equal(k.networking.disableDefaultCNI, true);
    assert.equal(k.networking.ipFamily, 'dual');
    assert.deepEqual(k.networking.podSubnet.split(',').map((c: string) => parseCidr(c).family), [4, 6]);
    assert.ok(k.nodes.filter((n: any) => n.role === 'worker').length >= 2);
    assert.match(k.containerdConfigPatches[0], /\[plugins\."io\.containerd\.nri\.v1\.nri"\]\s*\n\s*disable = false/);
  });
  it('the Kata RuntimeClass handler is a vm in the default config and a runtime in every containerd and CRI-O snippet', async () => {
    const YAML = (await import('yaml')).default;
    const fs = await import('node:fs');
    const path = await import('node:path');
    const { packageRoot } = await import('../plugin/server/protos');
    const dir = path.join(packageRoot(), 'kind-config');
    const docs = YAML.parseAllDocuments(fs.readFileSync(path.join(dir, 'runtimeclass-kata.yaml'), 'utf8')).map((d) => d.toJS());
    const rc = docs.find((d) => d.kind === 'RuntimeClass');
    assert.equal(parseConfig(undefined).runtimeHandlers[rc.handler], 'vm');
    const pod = docs.find((d) => d.kind === 'Pod');
    assert.equal(pod.spec.runtimeClassName, rc.metadata.name);
    assert.equal(pod.metadata.annotations['kni.dev/runtime-handler'], rc.handler);
    for (const f of ['containerd-1.6.toml', 'containerd-1.7.toml', 'containerd-2.x.toml']) {
      const toml = fs.readFileSync(path.join(dir, f), 'utf8');
      assert.match(toml, new RegExp(`containerd\\.runtimes\\.${rc.handler}\\]\\s*\\n\\s*runtime_type = "io\\.containerd\\.kata\\.v2"`), f);
    }
    // The containerd installed here (1.6) reads the v2-format snippets itself.
    const { execFileSync } = await import('node:child_process');
    for (const f of ['containerd-1.6.toml', 'containerd-1.7.toml']) {
      const dump = execFileSync('containerd', ['--config', path.join(dir, f), 'config', 'dump'], { encoding: 'utf8' });
      const table = dump.split(/\n\s*\[/).find((t) => t.startsWith('plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]'));
      assert.match(table ?? '', /runtime_type = "io\.containerd\.kata\.v2"/, f);
    }
    assert.match(fs.readFileSync(path.join(dir, 'crio/10-kni.conf'), 'utf8'), new RegExp(`\\[crio\\.runtime\\.runtimes\\.${rc.handler}\\][^[]*runtime_type = "vm"`));
  });
});
