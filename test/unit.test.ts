// Pure logic: address arithmetic, log lines, names, the event log, the range allocator, CNI results.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KniError } from '../plugin/core/errors';
import fc from 'fast-check';
import { cidrsOverlap, formatIp, formatIpBytes, formatNewIp, ipBytes, parseCidr, parseIp } from '../plugin/ipam/ip';
import { RangeAllocator } from '../plugin/ipam/range-allocator';
import { cniIpamStatus } from '../plugin/cni/cni-ipam-status';
import { parseNetworkConfig } from '../plugin/cni/conflist';
import { isoTime, log } from '../plugin/core/log';
import { hostVethName } from '../plugin/core/runtime-types';
import { EventLog } from '../plugin/core/events';
import { SandboxRecord } from '../plugin/store/records';
import { podMac } from '../plugin/pod/pod-wiring';
import { leavingFrom, selectsNode } from '../plugin/kube/leaving-node';
import { labelSelectorMatches } from '../plugin/kube/label-selectors';
import { parseTracedPort, policyVerdict } from '../plugin/kube/policy-verdict';
import { convertResult } from '../plugin/cni/cni-network';
import { unroutedPeersWarning } from '../plugin/kube/unrouted-peers';
import { slimNode } from '../plugin/kube/node-cache';
import { podCidrsOfNode } from '../plugin/kube/node-ranges';
import { nodePodCidrSource } from '../plugin/kube/node-cidr-pool';
import { freeBlock } from '../plugin/kube/node-cidr-pool';
import { unmasqueraded } from '../plugin/node/masquerade';
import { contestedClaims, rivalKey } from '../plugin/node/contested-cidrs';
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

describe('protobuf strings', () => {
  it('a string field is written by Buffer.write: the bytes of protobufjs\'s own loop, for any text and length', async () => {
    const { writeUtf8 } = await import('../plugin/server/protobuf-strings');
    const protobuf = (await import('protobufjs')).default;
    assert.equal(protobuf.util.utf8.write, writeUtf8, 'installed');
    const root = protobuf.Root.fromJSON({ nested: { M: { fields: { s: { type: 'string', id: 1 }, t: { type: 'string', id: 2 } } } } });
    const M = root.lookupType('M');
    fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 80 }), fc.string({ unit: 'grapheme-ascii', maxLength: 45 }), (s, t) => {
      const bytes = Buffer.from(M.encode({ s, t }).finish());
      // Set fields are written even when empty: the type is proto2's.
      const want = (id: number, v: string) => Buffer.concat([Buffer.from([(id << 3) | 2]), Buffer.from(protobuf.Writer.create().uint32(Buffer.byteLength(v)).finish()), Buffer.from(v, 'utf8')]);
      assert.equal(bytes.toString('hex'), Buffer.concat([want(1, s), want(2, t)]).toString('hex'));
      assert.deepEqual(M.toObject(M.decode(bytes)), { s, t });
    }), { numRuns: 1000 });
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

describe('whether kni leaves its node as its pod stops (the preStop)', () => {
  const ds = (uid: string, deleting = false) => ({ metadata: { name: 'kni', uid, ...(deleting ? { deletionTimestamp: new Date() } : {}) } });
  const pod = (owner?: { kind: string; uid: string }) => ({ metadata: { name: 'kni-abc', ownerReferences: owner ? [{ apiVersion: 'apps/v1', kind: owner.kind, name: 'kni', uid: owner.uid, controller: true }] : [] } });
  it('stays while its DaemonSet stays (rolling update, restart, a deleted pod); leaves when it is deleted, deleting, replaced, or nothing restarts the pod; a force-deleted pod stays', () => {
    assert.equal(leavingFrom(pod({ kind: 'DaemonSet', uid: 'u1' }), ds('u1')).leaving, false);
    assert.match(leavingFrom(pod({ kind: 'DaemonSet', uid: 'u1' }), ds('u1')).reason, /DaemonSet kni stays/);
    assert.match(leavingFrom(pod({ kind: 'DaemonSet', uid: 'u1' }), undefined).reason, /DaemonSet kni is deleted/);
    assert.equal(leavingFrom(pod({ kind: 'DaemonSet', uid: 'u1' }), ds('u1', true)).leaving, true);
    assert.equal(leavingFrom(pod({ kind: 'DaemonSet', uid: 'u1' }), ds('u2')).leaving, true);
    assert.equal(leavingFrom(pod({ kind: 'ReplicaSet', uid: 'u1' }), 'none').leaving, true);
    assert.equal(leavingFrom(pod(), 'none').leaving, true);
    // Force-deleted (graceful deletion keeps the object through the preStop): kept, as a new pod follows.
    assert.equal(leavingFrom(undefined, 'none').leaving, false);
  });

  it('leaves a node its DaemonSet no longer selects (nodeSelector, required node affinity), as the DaemonSet controller then deletes its pod', () => {
    const node = { metadata: { name: 'n1', labels: { role: 'net', size: '8' } } };
    const on = (spec: object) => ({ ...ds('u1'), spec: { selector: {}, template: { spec: { containers: [], ...spec } } } });
    const owned = pod({ kind: 'DaemonSet', uid: 'u1' });
    assert.equal(leavingFrom(owned, on({ nodeSelector: { role: 'net' } }), node).leaving, false);
    assert.match(leavingFrom(owned, on({ nodeSelector: { role: 'edge' } }), node).reason, /no longer selects node n1/);
    const affinity = (terms: object[]) => ({ affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: terms } } } });
    const holds = (terms: object[]) => selectsNode(affinity(terms) as any, node as any);
    assert.equal(holds([{ matchExpressions: [{ key: 'role', operator: 'In', values: ['net', 'x'] }] }]), true);
    assert.equal(holds([{ matchExpressions: [{ key: 'role', operator: 'NotIn', values: ['net'] }] }]), false);
    assert.equal(holds([{ matchExpressions: [{ key: 'gpu', operator: 'DoesNotExist' }, { key: 'size', operator: 'Gt', values: ['4'] }] }]), true);
    assert.equal(holds([{ matchExpressions: [{ key: 'size', operator: 'Lt', values: ['4'] }] }, { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n1'] }] }]), true, 'terms are ORed');
    assert.equal(holds([{}]), false, 'an empty term matches no node');
    assert.equal(selectsNode(undefined, node as any), true);
  });
});

describe('label selectors (which NetworkPolicies select a pod)', () => {
  it('matchLabels and every expression must hold; an empty selector selects every pod; Gt, Lt and unknown operators select none', () => {
    const labels = { app: 'web', tier: 'front' };
    const m = (sel: object | undefined) => labelSelectorMatches(sel as any, labels);
    assert.equal(m(undefined), true);
    assert.equal(m({}), true);
    assert.equal(m({ matchLabels: { app: 'web' } }), true);
    assert.equal(m({ matchLabels: { app: 'web', tier: 'back' } }), false);
    assert.equal(m({ matchExpressions: [{ key: 'app', operator: 'In', values: ['db', 'web'] }, { key: 'tier', operator: 'Exists' }] }), true);
    assert.equal(m({ matchExpressions: [{ key: 'app', operator: 'NotIn', values: ['web'] }] }), false);
    assert.equal(m({ matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['a'] }, { key: 'zone', operator: 'DoesNotExist' }] }), true, 'a label it lacks is in no set');
    assert.equal(m({ matchLabels: { app: 'web' }, matchExpressions: [{ key: 'tier', operator: 'DoesNotExist' }] }), false);
    assert.equal(m({ matchExpressions: [{ key: 'app', operator: 'Gt', values: ['1'] }] }), false);
    assert.equal(m({ matchExpressions: [{ key: 'app', operator: 'Like', values: ['web'] }] }), false);
    assert.equal(labelSelectorMatches({ matchExpressions: [{ key: 'toString', operator: 'Exists' }] }, {}), false, 'no label from the object prototype');
  });
});

describe('NetworkPolicy verdicts (knictl trace judges the policies on a path)', () => {
  const pol = (name: string, spec: object) => ({ metadata: { namespace: 'shop', name }, spec }) as any;
  const web = { app: 'web' };
  const client = { ip: parseIp('10.1.0.7'), pod: { namespace: 'shop', labels: { app: 'client' }, namespaceLabels: { 'kubernetes.io/metadata.name': 'shop', team: 'a' } } };
  const stranger = { ip: parseIp('10.1.0.8'), pod: { namespace: 'other', labels: { app: 'client' }, namespaceLabels: { 'kubernetes.io/metadata.name': 'other' } } };
  const outside = { ip: parseIp('192.0.2.9') };
  const httpPort = [{ name: 'http', port: 8080, protocol: 'TCP' as const }];
  const tcp = (port: number) => ({ port, protocol: 'TCP' as const });
  it('isolates only in the directions of its types (Ingress by default, Egress too with egress rules); a pod no policy selects is not isolated', () => {
    const deny = pol('deny', { podSelector: {} });
    assert.deepEqual(policyVerdict([deny], 'ingress', web, client, []), { selecting: ['shop/deny'], allowedBy: [], ports: [] });
    assert.deepEqual(policyVerdict([deny], 'egress', web, client, []).selecting, []);
    assert.deepEqual(policyVerdict([pol('out', { podSelector: {}, egress: [{}] })], 'egress', web, client, []), { selecting: ['shop/out'], allowedBy: ['shop/out'], ports: 'all' });
    assert.deepEqual(policyVerdict([pol('db', { podSelector: { matchLabels: { app: 'db' } } })], 'ingress', web, client, []).selecting, []);
  });
  it('peers: a podSelector alone is of the policy\'s namespace, a namespaceSelector takes namespaces by label, both together both; an ipBlock holds the address minus its excepts', () => {
    const from = (...peers: object[]) => [pol('p', { podSelector: { matchLabels: web }, ingress: [{ from: peers }] })];
    // As @kubernetes/client-node reads it, `from` is `_from`: either is taken.
    const read = (...peers: object[]) => from(...peers).map((p) => ({ ...p, spec: { ...p.spec, ingress: [{ _from: p.spec.ingress[0].from }] } }));
    const allowed = (peers: object[], peer: any) => {
      const [asRead, asWritten] = [read(...peers), from(...peers)].map((p) => policyVerdict(p, 'ingress', web, peer, []).allowedBy.length === 1);
      assert.equal(asRead, asWritten);
      return asRead;
    };
    assert.equal(allowed([{ podSelector: { matchLabels: { app: 'client' } } }], client), true);
    assert.equal(allowed([{ podSelector: { matchLabels: { app: 'client' } } }], stranger), false, 'another namespace');
    assert.equal(allowed([{ namespaceSelector: { matchLabels: { team: 'a' } } }], client), true);
    assert.equal(allowed([{ namespaceSelector: {} }], stranger), true, 'every namespace');
    assert.equal(allowed([{ namespaceSelector: {}, podSelector: { matchLabels: { app: 'db' } } }], stranger), false);
    assert.equal(allowed([{ podSelector: {} }], outside), false, 'an address is no pod');
    assert.equal(allowed([{ ipBlock: { cidr: '10.1.0.0/16', except: ['10.1.0.8/32'] } }], client), true);
    assert.equal(allowed([{ ipBlock: { cidr: '10.1.0.0/16', except: ['10.1.0.8/32'] } }], stranger), false);
    assert.equal(allowed([{ ipBlock: { cidr: 'fd00::/8' } }], outside), false, 'another family');
    assert.equal(allowed([{ ipBlock: { cidr: '0.0.0.0/0' } }], outside), true);
    assert.equal(allowed([], stranger), true, 'an empty from: every source');
  });
  it('ports: a traced port is judged by protocol, number, range and name (the receiving pod\'s container port); without one the allowed ports are described', () => {
    const ports = (...p: object[]) => [pol('p', { podSelector: {}, ingress: [{ ports: p }] })];
    const judge = (p: object[], port?: any, named = httpPort) => policyVerdict(ports(...p), 'ingress', web, client, named, port);
    assert.deepEqual(judge([{ port: 80 }], tcp(80)).allowedBy, ['shop/p']);
    assert.deepEqual(judge([{ port: 80 }], tcp(81)).allowedBy, []);
    assert.deepEqual(judge([{ port: 80 }], { port: 80, protocol: 'UDP' }).allowedBy, [], 'TCP unless said');
    assert.deepEqual(judge([{ protocol: 'UDP' }], { port: 53, protocol: 'UDP' }).allowedBy, ['shop/p'], 'no port: every port of the protocol');
    assert.deepEqual(judge([{ port: 8000, endPort: 8100 }], tcp(8080)).allowedBy, ['shop/p']);
    assert.deepEqual(judge([{ port: 8000, endPort: 8100 }], tcp(8101)).allowedBy, []);
    assert.deepEqual(judge([{ port: 'http' }], tcp(8080)).allowedBy, ['shop/p']);
    assert.deepEqual(judge([{ port: 'http' }], tcp(8080), []).allowedBy, [], 'a name the pod does not have');
    assert.deepEqual(judge([{ port: 80 }, { port: 'http' }, { port: 'grpc' }, { protocol: 'UDP' }, { port: 9000, endPort: 9009 }]), { selecting: ['shop/p'], allowedBy: ['shop/p'], ports: ['80/TCP', 'http (8080/TCP)', 'every UDP port', '9000-9009/TCP'] });
    assert.deepEqual(judge([{ port: 'grpc' }]), { selecting: ['shop/p'], allowedBy: [], ports: [] }, 'only a name the pod lacks: nothing');
  });
  it('policies add up: any selecting policy\'s rule lets it through; each rule needs its peer and its port', () => {
    const a = pol('a', { podSelector: {}, ingress: [{ from: [{ podSelector: { matchLabels: { app: 'db' } } }], ports: [{ port: 80 }] }] });
    const b = pol('b', { podSelector: { matchLabels: web }, ingress: [{ from: [{ podSelector: {} }], ports: [{ port: 443 }] }] });
    const v = (port?: any) => policyVerdict([a, b], 'ingress', web, client, [], port);
    assert.deepEqual(v(tcp(80)), { selecting: ['shop/a', 'shop/b'], allowedBy: [], ports: [] }, 'a has the port but not the peer');
    assert.deepEqual(v(tcp(443)).allowedBy, ['shop/b']);
    assert.deepEqual(v().ports, ['443/TCP']);
  });
  it('a traced port is a number 1-65535, TCP unless /UDP or /SCTP is said', () => {
    assert.deepEqual(parseTracedPort('80'), { port: 80, protocol: 'TCP' });
    assert.deepEqual(parseTracedPort(' 53/udp'), { port: 53, protocol: 'UDP' });
    assert.deepEqual(parseTracedPort('9/SCTP'), { port: 9, protocol: 'SCTP' });
    for (const bad of ['0', '65536', 'http', '80/icmp', '80/', '']) assert.throws(() => parseTracedPort(bad), /want a port 1-65535/, bad);
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

describe('other Nodes without podCIDRs (the node agent\'s warning)', () => {
  const view = (name: string, ...podCidrs: string[]) => ({ name, internalIPs: ['10.0.0.1'], podCidrs });
  it('names them, says why their pods are unreachable, and points at node IPAM when no Node has podCIDRs and kni\'s ranges are its config\'s', () => {
    assert.equal(unroutedPeersWarning([view('a', '10.1.0.0/24'), view('b', '10.1.1.0/24')], 'a', false), undefined);
    // Its own Node is not a peer.
    assert.equal(unroutedPeersWarning([view('a'), view('b', '10.1.1.0/24')], 'a', true), undefined);
    assert.equal(unroutedPeersWarning([view('a', '10.1.0.0/24'), view('c'), view('b', '10.1.1.0/24')], 'a', false), "Node c has no spec.podCIDRs, and kni routes to other nodes' pods by them: their pods are unreachable from this node until node IPAM gives them podCIDRs");
    const none = unroutedPeersWarning([view('a'), ...['h', 'g', 'f', 'e', 'd', 'c', 'b'].map((n) => view(n))], 'a', true)!;
    assert.match(none, /^Nodes b, c, d, e, f and 2 more have no spec\.podCIDRs, .*: kni's ranges come from its config here, and no other Node has podCIDRs: is node IPAM off\? .*--allocate-node-cidrs/);
    // From the Node (or a CNI default network's), the same Nodes are only waiting for theirs.
    assert.match(unroutedPeersWarning([view('a'), view('b')], 'a', false)!, /until node IPAM gives them podCIDRs$/);
  });
});

describe('where pod traffic keeps its source address (KNI-MASQ\'s returns)', () => {
  const c = (...t: string[]) => t.map(parseCidr);
  const texts = (l: ReturnType<typeof parseCidr>[]) => l.map((x) => x.text);
  it('is every pod CIDR of the cluster and nonMasqueradeCIDRs; with nodeIpam the cluster\'s CIDRs stand for the nodes\' blocks in them', () => {
    const none = { clusterCIDRs: [], nodeMaskSizeIPv4: 24, nodeMaskSizeIPv6: 64, configMap: 'kube-system/kni-node-cidrs' };
    assert.deepEqual(texts(unmasqueraded({ ranges: c('10.1.0.0/24', 'fd00:1::/64'), nonMasqueradeCIDRs: c('192.0.2.0/24'), nodeIpam: none }, c('10.1.1.0/24'))), ['10.1.0.0/24', 'fd00:1::/64', '10.1.1.0/24', '192.0.2.0/24']);
    const pool = { ...none, clusterCIDRs: c('10.1.0.0/16', 'fd00:1::/48') };
    // A peer's block outside the pool (set by another node IPAM before nodeIpam) still returns.
    assert.deepEqual(texts(unmasqueraded({ ranges: c('10.1.0.0/24', 'fd00:1::/64'), nonMasqueradeCIDRs: c('192.0.2.0/24'), nodeIpam: pool }, c('10.1.1.0/24', 'fd00:1:0:1::/64', '10.9.0.0/24'))), ['10.1.0.0/16', 'fd00:1::/48', '10.9.0.0/24', '192.0.2.0/24']);
  });
});

describe('Nodes\' podCIDRs that contest each other (peer routes refused)', () => {
  it('finds for each claim the first other node\'s claim overlapping it, as comparing every pair does, without comparing every pair', () => {
    // Claims of a few nodes, IPv4 and IPv6, nested, equal and disjoint, in one small space.
    const claim = fc.tuple(fc.constantFrom('a', 'b', 'c', 'd'), fc.boolean(), fc.integer({ min: 0, max: 255 }), fc.integer({ min: 20, max: 28 })).map(([node, v6, i, p]) => {
      const c = parseCidr(v6 ? `fd00:0:0:${(i << 4).toString(16)}::/${p + 36}` : `10.1.${i}.0/${p}`);
      return { node, cidr: parseCidr(`${formatIp(c.family, (c.base >> BigInt((c.family === 4 ? 32 : 128) - c.prefixLength)) << BigInt((c.family === 4 ? 32 : 128) - c.prefixLength))}/${c.prefixLength}`) };
    });
    fc.assert(fc.property(fc.array(claim, { maxLength: 30 }), (claims) => {
      const got = contestedClaims(claims);
      for (const c of claims) {
        const first = claims.find((o) => o.node !== c.node && cidrsOverlap(o.cidr, c.cidr));
        assert.equal(got.get(rivalKey(c.node, c.cidr)), first, `${c.node} ${c.cidr.text}`);
      }
    }), { seed: 55, numRuns: 2000 });
  });
});

describe('what kni keeps of a Node in its cache', () => {
  it('keeps the name, uid, resourceVersion, kni\'s annotation, podCIDRs and addresses; drops the kubelet\'s status and managedFields', () => {
    const full = (ipam: boolean): any => ({
      metadata: { name: 'n1', uid: 'u1', resourceVersion: '42', labels: { a: 'b' }, annotations: { 'node.alpha.kubernetes.io/ttl': '0', ...(ipam ? { 'kni.dev/node-ipam': '10.1.0.0/24,fd00:1::/64' } : {}) }, managedFields: [{ manager: 'kubelet', fieldsV1: { 'f:status': {} } }] },
      spec: { podCIDR: '10.1.0.0/24', podCIDRs: ['10.1.0.0/24', 'fd00:1::/64'], providerID: 'x', taints: [{ key: 'k', effect: 'NoSchedule' }] },
      status: { addresses: [{ type: 'InternalIP', address: '172.16.0.1' }, { type: 'Hostname', address: 'n1' }], images: [{ names: ['busybox'], sizeBytes: 1 }], conditions: [{ type: 'Ready', status: 'True' }], nodeInfo: { kubeletVersion: 'v1' } },
    });
    for (const ipam of [true, false]) {
      const n = full(ipam);
      slimNode(n);
      assert.deepEqual(n, {
        metadata: { name: 'n1', uid: 'u1', resourceVersion: '42', ...(ipam ? { annotations: { 'kni.dev/node-ipam': '10.1.0.0/24,fd00:1::/64' } } : {}) },
        spec: { podCIDR: '10.1.0.0/24', podCIDRs: ['10.1.0.0/24', 'fd00:1::/64'] },
        status: { addresses: [{ type: 'InternalIP', address: '172.16.0.1' }, { type: 'Hostname', address: 'n1' }] },
      });
      assert.deepEqual(podCidrsOfNode(n).map((c) => c.text), podCidrsOfNode(full(ipam)).map((c) => c.text));
      assert.equal(nodePodCidrSource(n), nodePodCidrSource(full(ipam)));
    }
    // A Node with nothing set stays valid.
    const bare: any = { metadata: { name: 'n2' } };
    slimNode(bare);
    assert.deepEqual(bare, { metadata: { name: 'n2' } });
  });
});

describe('nodeIpam: a Node\'s block from the cluster\'s pod CIDRs', () => {
  it('is the lowest block of the pool that no taken CIDR overlaps, whatever is taken; none when all are', () => {
    const pool = parseCidr('10.8.0.0/20');
    // Taken: anything from /18 (the whole pool and more) to /28 (part of one block), in and around the pool.
    const taken = fc.array(fc.tuple(fc.integer({ min: 0, max: 63 }), fc.integer({ min: 18, max: 28 })).map(([i, p]) => parseCidr(`${formatIp(4, (10n << 24n) + (8n << 16n) - (16n << 8n) + (BigInt(i) << 8n))}/${p}`)), { maxLength: 20 });
    fc.assert(fc.property(taken, (t) => {
      const blocks = Array.from({ length: 16 }, (_, i) => parseCidr(`10.8.${i}.0/24`));
      const free = blocks.filter((b) => !t.some((x) => cidrsOverlap(x, b)));
      const got = freeBlock(pool, 24, t);
      assert.equal(got?.text, free[0]?.text);
    }), { seed: 54, numRuns: 2000 });
    assert.equal(freeBlock(parseCidr('fd00:10:244::/56'), 64, [parseCidr('fd00:10:244::/64'), parseCidr('fd00:10:244:2::/64'), parseCidr('10.8.0.0/24')])?.text, 'fd00:10:244:1::/64');
  });
});
