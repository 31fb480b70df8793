// Pure logic: address arithmetic, log lines, names, the event log, the range allocator, CNI results.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KniError } from '../plugin/core/errors';
import fc from 'fast-check';
import { formatIp, formatIpBytes, formatNewIp, ipBytes, parseCidr, parseIp } from '../plugin/ipam/ip';
import { RangeAllocator } from '../plugin/ipam/range-allocator';
import { cniIpamStatus } from '../plugin/cni/cni-ipam-status';
import { parseNetworkConfig } from '../plugin/cni/conflist';
import { isoTime, log } from '../plugin/core/log';
import { hostVethName } from '../plugin/core/runtime-types';
import { EventLog } from '../plugin/core/events';
import { SandboxRecord } from '../plugin/store/records';
import { podMac } from '../plugin/pod/pod-wiring';
import { convertResult } from '../plugin/cni/cni-network';
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

  it('formats an address from its bytes in network order as formatIp formats its value (netlink dumps are read that way)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 16, maxLength: 16 }), fc.boolean(), fc.nat(3), (bytes, v4, pad) => {
        const b = Buffer.concat([Buffer.alloc(pad, 0xff), Buffer.from(v4 ? bytes.subarray(0, 4) : bytes)]);
        const value = [...b.subarray(pad)].reduce((acc, x) => (acc << 8n) | BigInt(x), 0n);
        assert.equal(formatIpBytes(b, pad, b.length - pad), formatIp(v4 ? 4 : 6, value));
      }),
    );
    assert.throws(() => formatIpBytes(Buffer.alloc(6)), /6 bytes is neither IPv4 nor IPv6/);
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

describe('log lines', () => {
  it('a line\'s time is what Date\'s toISOString writes, for any millisecond, second after second', () => {
    fc.assert(fc.property(fc.integer({ min: -62_000_000_000_000, max: 8_000_000_000_000_000 }), fc.nat(2500), (start, step) => {
      for (const ms of [start, start + step, start + 2 * step, start - step]) assert.equal(isoTime(ms), new Date(ms).toISOString());
    }), { numRuns: 2000 });
    assert.equal(isoTime(0), '1970-01-01T00:00:00.000Z');
    assert.equal(isoTime(1_700_000_000_123.9), new Date(1_700_000_000_123.9).toISOString());
    assert.match(isoTime(), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

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

describe('event log', () => {
  it('keeps exactly the last N events through any number of wraps; older tokens are told to re-list', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 0, max: 60 }), fc.nat(70), (size, emitted, asked) => {
      const log = new EventLog(size);
      const rec = { id: 'sb', pod: { name: 'p', namespace: 'ns', uid: 'u' }, netnsPath: '/run/netns/x', interfaces: [] } as unknown as SandboxRecord;
      const seen: string[] = [];
      log.subscribe((e) => seen.push(e.token));
      for (let i = 0; i < emitted; i++) log.emit('attached', rec, `m${i + 1}`);
      assert.equal(seen.length, emitted);
      const after = Math.min(asked, emitted);
      const token = `${log.boot}-${after}`;
      if (after + 1 < emitted - size + 1) {
        assert.throws(() => log.since(token), (e: KniError) => e.code === 'FAILED_PRECONDITION' && e.message.includes(`keeps the last ${size}`));
        return;
      }
      const got = log.since(token);
      assert.deepEqual(got.map((e) => e.seq), Array.from({ length: emitted - after }, (_, i) => after + 1 + i));
      assert.deepEqual(got.map((e) => e.message), got.map((e) => `m${e.seq}`));
      assert.deepEqual(got.map((e) => e.token), seen.slice(after));
    }), { numRuns: 500 });
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

describe('CNI result conversion', () => {
  it('converts whatever a plugin printed to every version without throwing, and a legacy result keeps its addresses', () => {
    const versions = ['0.1.0', '0.2.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];
    fc.assert(fc.property(fc.jsonValue(), fc.constantFrom(...versions), (v, to) => void convertResult(v, to)), { numRuns: 500 });
    const junk = { cniVersion: '0.2.0', ip4: { ip: '10.1.0.5/24', routes: [null, 7, { dst: '0.0.0.0/0', gw: '10.1.0.1' }] }, ip6: { ip: 5 } };
    assert.deepEqual(convertResult(junk, '1.0.0'), { cniVersion: '1.0.0', ips: [{ address: '10.1.0.5/24' }], routes: [{ dst: '0.0.0.0/0', gw: '10.1.0.1' }] });
    assert.deepEqual(convertResult({ cniVersion: '1.0.0', ips: [null, { address: 'fd00::5/64' }], routes: [3] }, '0.2.0'), { cniVersion: '0.2.0', ip6: { ip: 'fd00::5/64' } });
  });
});
