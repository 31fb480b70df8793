// Hostile input, property-based (fast-check): every RPC of both APIs with random and malformed
// messages, raw garbage bytes, and the CNI shim with random environment and stdin. Only precise
// errors; the daemon stays up and what it holds is intact.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import * as grpc from '@grpc/grpc-js';
import fc from 'fast-check';

/** One seed per run, printed with any failure; KNI_TEST_SEED=<n> replays a run. */
const SEED = Number(process.env.KNI_TEST_SEED ?? Math.floor(Math.random() * 2 ** 31));

/** fast-check with its report cut short: a counterexample can hold a megabyte of "A". */
async function check(p: fc.IAsyncProperty<any> | fc.IProperty<any>, params: fc.Parameters<any>): Promise<void> {
  const r = await fc.check(p as fc.IAsyncProperty<any>, params);
  if (r.failed) {
    const ex = JSON.stringify(r.counterexample).slice(0, 600);
    throw new Error(`property failed after ${r.numRuns} runs (replay: KNI_TEST_SEED=${SEED}; fast-check seed ${r.seed}, path ${r.counterexamplePath}): ${String((r.errorInstance as Error)?.message ?? r.errorInstance).slice(0, 1500)}\ncounterexample (cut): ${ex}`);
  }
}
import * as protoLoader from '@grpc/proto-loader';
import { kniService, protoOptions, runtimeService } from '../plugin/server/protos';
import { SHIM } from './helpers/cni-exec';
import { TestDaemon } from './helpers/test-daemon';

// What a careless or hostile caller sends. Never /proc/1/ns/net: that is the host's netns here
// (the daemon runs in a stand-in node netns), a legitimate target kni cannot tell from a pod's.
const hostileString = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 4, arbitrary: fc.constantFrom('', '.', '..', '../../etc/passwd', '/run/netns/../../etc', 'a/b', '/etc/passwd', '/run/netns/', '/run/netns//x', '/proc/self/ns/net', '/proc/0/ns/net', '/proc/999999999/ns/net', '/dev/null', '/run/netns/missing', 'eth0', 'lo', 'é'.repeat(9), 'x'.repeat(16), 'eth0:1', 'a b', '10.0.0.0/33', 'fd00::/129', 'kata', 'vm', '\u0000', 'kni0', '-1', '99999999999999999999') },
  { weight: 1, arbitrary: fc.string({ minLength: 300, maxLength: 5000 }) },
  { weight: 1, arbitrary: fc.constant('A'.repeat(1 << 20)) },
);

type Descriptor = { name: string; field: any[]; nestedType: any[] };
/** Every message type of our protos by full name, to fuzz nested messages too. */
const TYPES = new Map<string, Descriptor>();
for (const file of ['kni/kni.proto', 'kni/runtime/v1/runtime.proto']) {
  const def = protoLoader.loadSync(file, protoOptions());
  for (const [name, t] of Object.entries(def)) if ((t as any).format === 'Protocol Buffer 3 DescriptorProto') TYPES.set(name, (t as any).type);
}

/** A random message for a proto-loader type: every field, hostile values, maps, nested messages. */
function messageArb(type: Descriptor, depth = 0): fc.Arbitrary<Record<string, unknown>> {
  const fields: Record<string, fc.Arbitrary<unknown>> = {};
  for (const f of type.field) {
    let v: fc.Arbitrary<unknown>;
    const entry = f.typeName ? type.nestedType.find((n: any) => f.typeName.endsWith(`.${n.name}`)) : undefined;
    if (entry?.options?.mapEntry) v = fc.dictionary(hostileString, hostileString, { maxKeys: 20 });
    else if (f.type === 'TYPE_STRING') v = hostileString;
    else if (f.type === 'TYPE_BOOL') v = fc.boolean();
    else if (/INT|FIXED/.test(f.type)) v = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 });
    else if (f.type === 'TYPE_ENUM') v = fc.integer({ min: -1, max: 5 });
    else if (f.type === 'TYPE_MESSAGE') {
      const nested = TYPES.get(String(f.typeName).replace(/^\./, ''));
      v = nested && depth < 3 ? messageArb(nested, depth + 1) : fc.constant({});
    } else continue;
    fields[f.name] = f.label === 'LABEL_REPEATED' && !entry?.options?.mapEntry ? fc.array(v, { maxLength: 5 }) : v;
  }
  return fc.record(fields, { requiredKeys: [] });
}

/** What a successful answer must say about the request it answers. */
const ANSWERS: Record<string, (req: any, res: any) => void> = {
  Attach: (req, res) => {
    assert.equal(res.sandbox_id, req.sandbox_id);
    assert.equal(res.netns_path, req.netns_path);
    assert.equal(res.interfaces[0].name, req.interface_name || 'eth0');
    assert.ok(res.interfaces[0].addresses.length > 0);
  },
  GetPod: (req, res) => assert.equal(res.sandbox_id, req.sandbox_id),
  Check: (_req, res) => assert.equal(res.ok, res.problems.length === 0),
  Trace: (_req, res) => assert.equal(res.ok, res.hops.length > 0 && res.hops.every((h: any) => !h.problem)),
  ListPods: (req, res) => {
    if (req.page_size > 0) assert.ok(res.pods.length <= req.page_size);
    for (const p of res.pods) assert.ok(!req.page_token || p.sandbox_id > req.page_token);
  },
  CreateNetwork: (_req, res) => assert.match(res.netns_path, /\/kni-[0-9a-f]{16}$/),
  AttachInterface: (_req, res) => assert.ok(res.ipconfigs.eth0?.ip.length > 0),
  QueryPodNetwork: (_req, res) => assert.ok(res.ipconfigs.eth0?.ip.length > 0),
};

// Precise answers: what a bad request may get. INTERNAL, UNKNOWN or UNAVAILABLE mean a bug.
const PRECISE = new Set([grpc.status.INVALID_ARGUMENT, grpc.status.NOT_FOUND, grpc.status.ALREADY_EXISTS, grpc.status.RESOURCE_EXHAUSTED, grpc.status.FAILED_PRECONDITION, grpc.status.UNIMPLEMENTED]);

/** A server stream (Watch): its error, or null once it has stayed open 100 ms (then cancelled). */
function openStream(stream: grpc.ClientReadableStream<unknown>): Promise<[grpc.ServiceError | null, undefined]> {
  return new Promise((resolve) => {
    let done = false;
    const timer = setTimeout(() => {
      done = true;
      stream.cancel();
      resolve([null, undefined]);
    }, 100);
    stream.on('data', () => undefined);
    stream.on('error', (e: grpc.ServiceError) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve([e, undefined]);
    });
  });
}

describe('hostile input (fast-check)', () => {
  let d: TestDaemon;
  let keep: any;
  let fuzzFrom = 0;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.65.0.0/24', 'fd00:65::/64'] });
    keep = await d.rt().Attach({ sandbox_id: 'keep', netns_path: d.makePodNetns('keep'), pod: { name: 'keep', namespace: 'fuzz' } });
    fuzzFrom = d.output.length;
  });
  after(() => d?.cleanup());
  afterEach(function () {
    // A failure here is most useful with what the daemon said about it.
    if (this.currentTest?.state === 'failed') { fs.writeFileSync(`/tmp/kni-fuzz-daemon-${process.pid}.log`, d.output); process.stderr.write(`daemon output: /tmp/kni-fuzz-daemon-${process.pid}.log; last lines:\n${d.output.slice(-1500)}\n`); }
  });

  const services = () => [
    { def: runtimeService(), name: 'kni.runtime.v1.NetworkRuntime' },
    { def: kniService(), name: 'kni.KNI' },
  ];

  it('every RPC of both services answers random and malformed messages with a precise status', async function () {
    this.timeout(300_000);
    const seen = new Map<string, Set<string>>();
    for (const { def } of services()) {
      const Ctor = grpc.makeGenericClientConstructor(def.service, 'x');
      const client = new Ctor(`unix://${d.socket}`, grpc.credentials.createInsecure(), { 'grpc.max_send_message_length': 8 << 20 });
      try {
        for (const [method, m] of Object.entries(def.service) as [string, any][]) {
          let arb = messageArb(m.requestType.type as Descriptor);
          // A GC with a live list of valid ids would (rightly) release "keep": keep one bad id in it.
          if (method === 'GarbageCollect') arb = arb.map((r) => ({ ...r, live_sandbox_ids: ['a/b', ...((r.live_sandbox_ids as string[]) ?? [])] }));
          await check(fc.asyncProperty(arb, async (req) => {
            const [err, res] = m.responseStream
              ? await openStream((client as any)[method](req, { deadline: Date.now() + 10_000 }))
              : await new Promise<[grpc.ServiceError | null, any]>((resolve) => (client as any)[method](req, { deadline: Date.now() + 10_000 }, (e: grpc.ServiceError | null, r: any) => resolve([e, r])));
            if (!err) {
              ANSWERS[method]?.(req, res);
              return;
            }
            if (!seen.has(method)) seen.set(method, new Set());
            seen.get(method)!.add(grpc.status[err.code]);
            assert.ok(PRECISE.has(err.code), `${method} answered ${grpc.status[err.code]}: ${err.details}\nrequest: ${JSON.stringify(req).slice(0, 500)}`);
            assert.ok(err.details && err.details.length < 2000, `${method}: empty or unbounded message`);
          }), { numRuns: 40, seed: SEED });
        }
      } finally {
        client.close();
      }
    }
    assert.ok(seen.get('Attach')?.has('INVALID_ARGUMENT'), 'the fuzzer never reached validation');
  });

  it('raw garbage bytes on every method: an error status, never a dead daemon', async function () {
    this.timeout(120_000);
    const client = new grpc.Client(`unix://${d.socket}`, grpc.credentials.createInsecure());
    try {
      for (const { def, name } of services()) {
        // Not GarbageCollect: bytes that decode to an empty live list rightly release everything.
        for (const method of Object.keys(def.service).filter((m) => m !== 'GarbageCollect')) {
          await check(fc.asyncProperty(fc.uint8Array({ maxLength: 2048 }), async (bytes) => {
            const err = (def.service as any)[method].responseStream
              ? (await openStream(client.makeServerStreamRequest(`/${name}/${method}`, (b: Buffer) => b, (b: Buffer) => b, Buffer.from(bytes))))[0]
              : await new Promise<grpc.ServiceError | null>((resolve) =>
                client.makeUnaryRequest(`/${name}/${method}`, (b: Buffer) => b, (b: Buffer) => b, Buffer.from(bytes), (e) => resolve(e)));
            if (err) assert.ok(PRECISE.has(err.code), `${method} answered garbage with ${grpc.status[err.code]}: ${err.details}`);
          }), { numRuns: 15, seed: SEED });
        }
      }
    } finally {
      client.close();
    }
  });

  it('the CNI shim: random environment and stdin get a CNI error object, never a crash or an internal error', async function () {
    this.timeout(120_000);
    const conf = fc.oneof(
      fc.record({
        cniVersion: fc.oneof(fc.constantFrom('0.4.0', '1.0.0', '1.1.0', '0.3.1', '9.9.9'), hostileString),
        name: hostileString,
        type: fc.constant('kni-cni'),
        socket: fc.constant(d.cniSocket),
        runtimeConfig: fc.oneof(fc.constant(undefined), fc.dictionary(hostileString, fc.jsonValue())),
        prevResult: fc.jsonValue(),
        'cni.dev/valid-attachments': fc.oneof(fc.jsonValue(), fc.array(fc.record({ containerID: hostileString, ifname: hostileString }))),
      }, { requiredKeys: ['socket'] }).map((o) => JSON.stringify(o)),
      fc.string({ maxLength: 200 }).map((s) => `{"socket":"${d.cniSocket}",${s}`),
    );
    const env = fc.record({
      CNI_COMMAND: fc.oneof(fc.constantFrom('ADD', 'DEL', 'CHECK', 'STATUS', 'GC', 'VERSION'), fc.string({ maxLength: 10 })),
      CNI_CONTAINERID: hostileString.filter((s) => s.length < 10000 && !s.includes('\0')),
      CNI_NETNS: hostileString.filter((s) => s.length < 10000 && !s.includes('\0')),
      CNI_IFNAME: hostileString.filter((s) => s.length < 1000 && !s.includes('\0')),
      CNI_ARGS: fc.string({ maxLength: 200 }).filter((s) => !s.includes('\0')),
    }, { requiredKeys: ['CNI_COMMAND'] });
    await check(fc.property(env, conf, (e, c) => {
      const r = spawnSync(SHIM, [], { input: c, env: e as Record<string, string>, encoding: 'utf8', timeout: 10_000 });
      assert.ok(r.status === 0 || r.status === 1, `exit ${r.status} (signal ${r.signal})`);
      if (r.status === 1) {
        const out = JSON.parse(r.stdout);
        assert.equal(typeof out.code, 'number');
        assert.equal(typeof out.msg, 'string');
        assert.notEqual(out.code, 101, `internal error: ${out.msg} ${out.details}`);
      }
    }), { numRuns: 250, seed: SEED });
  });

  it('afterwards the daemon serves and what it held is intact', async () => {
    const rt = d.rt();
    assert.equal((await rt.GetNode({})).ready, true);
    const now = await rt.GetPod({ sandbox_id: 'keep' });
    assert.deepEqual(now.interfaces, keep.interfaces);
    assert.deepEqual((await rt.Check({ sandbox_id: 'keep' })).problems, []);
    assert.match(d.output.slice(fuzzFrom), /"msg":"attach failed"/, 'the fuzzing never reached an attach');
  });

  it('the CNI conflist parser: any JSON (near-valid configs included) gives a well-formed list or a CniConfigError, nothing else', async () => {
    const { CNI_VERSIONS, CniConfigError, parseNetworkConfig } = await import('../plugin/cni/conflist');
    const plugin = fc.record({ type: fc.oneof(fc.constantFrom('bridge', 'host-local', '../x', ''), fc.string({ maxLength: 10 }), fc.integer()), capabilities: fc.option(fc.dictionary(fc.string({ maxLength: 8 }), fc.oneof(fc.boolean(), fc.integer())), { nil: undefined }) }, { requiredKeys: [] });
    const nearValid = fc.record({ cniVersion: fc.oneof(fc.constantFrom('0.3.1', '0.4.0', '1.0.0', '1.1.0', '2.0'), fc.string({ maxLength: 6 })), name: fc.oneof(fc.constantFrom('net', 'a b', ''), fc.string({ maxLength: 12 })), plugins: fc.oneof(fc.array(plugin, { maxLength: 4 }), fc.anything()), disableCheck: fc.option(fc.oneof(fc.constantFrom('TRUE', 'false', 'yes'), fc.anything()), { nil: undefined }), cniVersions: fc.option(fc.oneof(fc.array(fc.constantFrom('0.4.0', '1.0.0', '1.1.0', '1.2.0', '9.0.0', '1.0', 'x')), fc.anything()), { nil: undefined }) }, { requiredKeys: [] });
    const text = fc.oneof(fc.json(), nearValid.map((v) => JSON.stringify(v)), fc.string({ maxLength: 60 }));
    await check(fc.property(text, (t) => {
      try {
        const l = parseNetworkConfig(t, 'fuzz');
        assert.ok(l.plugins.length > 0 && l.plugins.every((p) => typeof p.type === 'string' && !p.type.includes('/')));
        assert.ok(CNI_VERSIONS.includes(l.cniVersion) && typeof l.disableCheck === 'boolean', `${l.cniVersion} ${l.disableCheck}`);
        assert.equal(typeof l.name, 'string');
      } catch (e) {
        if (!(e instanceof CniConfigError)) throw e;
        assert.ok(e.message.startsWith('fuzz: '));
      }
    }), { seed: SEED, numRuns: 2000 });
  });

  it('the networks annotation parser: any text or JSON (near-valid selections included) gives well-formed selections or a SelectionError, nothing else', async () => {
    const { parseNetworkSelections, SelectionError, isInterfaceName } = await import('../plugin/networks/network-selection');
    const name = fc.oneof(fc.constantFrom('macvlan', 'team/ipvlan', 'a.b', 'UPPER', '', '-x', 'ns/'), fc.string({ maxLength: 12 }));
    const el = fc.record({
      name, namespace: fc.option(fc.oneof(fc.constantFrom('kube-system', ''), fc.string({ maxLength: 8 })), { nil: undefined }),
      interface: fc.option(fc.oneof(fc.constantFrom('net1', 'eth0', 'a/b', 'x'.repeat(16)), fc.string({ maxLength: 16 })), { nil: undefined }),
      ips: fc.option(fc.oneof(fc.array(fc.constantFrom('10.1.1.5/24', '10.1.1.5', 'fd00::5/64', '10.1.1.5/33', 'x')), fc.anything()), { nil: undefined }),
      mac: fc.option(fc.oneof(fc.constantFrom('c2:11:22:33:44:55', 'zz'), fc.anything()), { nil: undefined }),
      'default-route': fc.option(fc.oneof(fc.array(fc.constantFrom('10.1.1.1', 'x')), fc.anything()), { nil: undefined }),
      'cni-args': fc.option(fc.anything(), { nil: undefined }),
      interfaceRequest: fc.option(fc.oneof(fc.constantFrom('net7', 'a:b', ''), fc.anything()), { nil: undefined }),
      'infiniband-guid': fc.option(fc.oneof(fc.constantFrom('24:8A:07:03:00:8d:ae:2e', 'c2:11:22:33:44:55', ''), fc.anything()), { nil: undefined }),
      deviceID: fc.option(fc.oneof(fc.constantFrom('0000:03:02.3', 'a b', 'x'.repeat(254)), fc.anything()), { nil: undefined }),
      other: fc.option(fc.anything(), { nil: undefined }),
    }, { requiredKeys: [] });
    const textForm = fc.array(fc.tuple(fc.option(name, { nil: undefined }), name, fc.option(fc.string({ maxLength: 16 }), { nil: undefined })), { maxLength: 5 })
      .map((items) => items.map(([ns, n, itf]) => `${ns !== undefined ? `${ns}/` : ''}${n}${itf !== undefined ? `@${itf}` : ''}`).join(', '));
    const text = fc.oneof(fc.string({ maxLength: 60 }), textForm, fc.array(el, { maxLength: 5 }).map((l) => JSON.stringify(l)), fc.json());
    await check(fc.property(text, (t) => {
      try {
        const sels = parseNetworkSelections(t, 'pods');
        const names = new Set(['eth0']);
        for (const s of sels) {
          assert.ok(isInterfaceName(s.interface) && !names.has(s.interface), `interface ${s.interface}`);
          names.add(s.interface);
          assert.match(s.name, /^[a-z0-9]/);
          assert.match(s.namespace, /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
          if (s.infinibandGuid !== undefined) assert.match(s.infinibandGuid, /^[0-9a-f]{2}(:[0-9a-f]{2}){7}$/);
          if (s.deviceId !== undefined) assert.ok(typeof s.deviceId === 'string' && s.deviceId.length <= 253 && !/\s/.test(s.deviceId));
        }
      } catch (e) {
        if (!(e instanceof SelectionError)) throw e;
      }
    }), { seed: SEED, numRuns: 3000 });
    assert.deepEqual(parseNetworkSelections('a, other/b@x1 ,c', 'pods').map((s) => `${s.namespace}/${s.name}@${s.interface}`), ['pods/a@net1', 'other/b@x1', 'pods/c@net3']);
    // Multus's keys: interfaceRequest (the name of interface before Multus 3.2) only when interface is not given.
    const [ib, old, both] = parseNetworkSelections(JSON.stringify([
      { name: 'ib', 'infiniband-guid': '24:8A:07:03:00:8D:AE:2E', deviceID: '0000:03:02.3' },
      { name: 'old', interfaceRequest: 'data0' },
      { name: 'both', interface: 'data1', interfaceRequest: 'ignored' },
    ]), 'pods');
    assert.deepEqual([ib.interface, ib.infinibandGuid, ib.deviceId, old.interface, both.interface], ['net1', '24:8a:07:03:00:8d:ae:2e', '0000:03:02.3', 'data0', 'data1']);
    assert.throws(() => parseNetworkSelections('[{"name":"ib","infiniband-guid":"c2:11:22:33:44:55","deviceID":"a b"}]', 'pods'), /infiniband-guid must be eight hex pairs.*deviceID must be a device id/);
    // Control characters never pass as a name kni shows an operator (knictl, logs).
    assert.throws(() => parseNetworkSelections(JSON.stringify([{ name: 'a', interface: '\u001b[8mx' }]), 'pods'), /interface "\\u001b\[8mx" is not an interface name/);
    assert.throws(() => parseNetworkSelections(JSON.stringify([{ name: 'a', deviceID: 'dev\u0007' }]), 'pods'), /deviceID must be a device id/);
    // The same texts as a pod's default network: none, exactly one on the runtime's interface, or a SelectionError.
    const { parseDefaultNetwork } = await import('../plugin/networks/network-selection');
    await check(fc.property(text, (t) => {
      try {
        const s = parseDefaultNetwork(t, 'eth0');
        if (s) {
          assert.equal(s.interface, 'eth0');
          assert.equal(s.defaultRoute, undefined);
          assert.match(s.namespace, /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
        }
      } catch (e) {
        if (!(e instanceof SelectionError)) throw e;
      }
    }), { seed: SEED, numRuns: 3000 });
    assert.equal(parseDefaultNetwork('macvlan', 'eth0')?.namespace, 'kube-system');
  });

  it('the config parser (file, ConfigMap): any YAML or JSON (near-valid settings included) gives a config or a ConfigError naming its source, nothing else', async () => {
    const { ConfigError, parseConfigText } = await import('../plugin/core/config');
    const value = fc.oneof(fc.constantFrom(null, 0, -1, 1500, 70000, true, '', 'routed', 'bridge', 'auto', 'vxlan', 'host-gw', 'kni0', '10.1.0.0/16', 'fd00::/64', '10.1.0.0/33', '/run/netns', 'relative', 'kata', 'vm'), fc.string({ maxLength: 12 }), fc.integer(), fc.array(fc.oneof(fc.constantFrom('10.1.0.0/16', 'fd00::/64', '10.2.0.0/31', 'x', '/run/netns'), fc.anything()), { maxLength: 3 }), fc.dictionary(fc.constantFrom('socket', 'nodeName', 'enabled', 'timeoutMs', 'port', 'vni', 'dir', 'required', 'kata', 'confDir', 'other'), fc.anything(), { maxKeys: 3 }), fc.anything());
    const keys = ['name', 'bridge', 'bridgeMulticastSnooping', 'podLink', 'mtu', 'ranges', 'logLevel', 'kubernetes', 'backend', 'vxlan', 'defaultNetwork', 'networks', 'extensions', 'netnsDir', 'netnsPoolSize', 'allowedNetnsRoots', 'masquerade', 'nonMasqueradeCIDRs', 'allowPodForwarding', 'unclaimedNetnsGraceSeconds', 'reconcileSeconds', 'repairOnNotice', 'cni', 'cri', 'nri', 'runtimeHandlers', 'vmTap', 'unknown'];
    const nearValid = fc.dictionary(fc.constantFrom(...keys), value, { maxKeys: 6 });
    const text = fc.oneof(fc.json(), nearValid.map((v) => JSON.stringify(v)), fc.string({ maxLength: 60 }), fc.constantFrom('a: [', ': :', '- 1', '{"ranges": ["10.1.0.0/16"], "podLink": "routed"}', 'null', '~'));
    await check(fc.property(text, (t) => {
      try {
        const cfg = parseConfigText(t, 'fuzz.yaml');
        assert.ok(cfg.ranges.length <= 2 && (cfg.mtu === 0 || cfg.mtu >= 576) && typeof cfg.bridge === 'string');
      } catch (e) {
        if (!(e instanceof ConfigError)) throw e;
        assert.ok(e.message.startsWith('fuzz.yaml: '), e.message);
      }
    }), { seed: SEED, numRuns: 3000 });
  });

  it('a Node\'s podCIDRs and a NetworkAttachmentDefinition\'s spec.config: anything gives ranges or a reason, a definition or its error', async () => {
    const { podCidrsOfNode } = await import('../plugin/kube/node-ranges');
    const { parseDefinition } = await import('../plugin/networks/network-definitions');
    const cidr = fc.oneof(fc.constantFrom('10.244.1.0/24', 'fd00:10:244:1::/64', '10.0.0.0/31', 'fd00::/127', '10.1.0.0/16', '300.1.0.0/16', '10.1.0.0', '', 'x'), fc.string({ maxLength: 20 }));
    const node = fc.record({ spec: fc.option(fc.record({ podCIDRs: fc.option(fc.array(cidr, { maxLength: 4 }), { nil: undefined }), podCIDR: fc.option(cidr, { nil: undefined }) }, { requiredKeys: [] }), { nil: undefined }) }, { requiredKeys: [] });
    await check(fc.property(node, (n) => {
      try {
        const ranges = podCidrsOfNode(n as never);
        assert.ok(ranges.length <= 2 && new Set(ranges.map((r) => r.family)).size === ranges.length);
      } catch (e) {
        assert.ok(e instanceof Error && e.constructor === Error && e.message.length > 0, String(e));
      }
    }), { seed: SEED, numRuns: 2000 });
    const config = fc.oneof(fc.json(), fc.string({ maxLength: 60 }), fc.record({ cniVersion: fc.constantFrom('0.3.1', '1.0.0', 'x'), type: fc.oneof(fc.constantFrom('macvlan', 'ipvlan', '../x', ''), fc.anything()), ipam: fc.oneof(fc.record({ type: fc.constantFrom('host-local', 'static', 'dhcp'), dataDir: fc.option(fc.anything(), { nil: undefined }) }, { requiredKeys: [] }), fc.anything()), plugins: fc.option(fc.anything(), { nil: undefined }) }, { requiredKeys: [] }).map((o) => JSON.stringify(o)));
    await check(fc.property(config, (t) => {
      const d = parseDefinition('team', 'net', 'api', 'uid-1', t, '/var/lib/kni/cni-ipam');
      assert.ok((d.config === undefined) !== (d.error === undefined), 'a config or an error, never both or neither');
      if (d.error) assert.ok(d.error.length > 0);
      for (const p of d.config?.plugins ?? []) {
        const ipam = p.ipam as Record<string, unknown> | undefined;
        if (ipam && typeof ipam === 'object' && ipam.type === 'host-local') assert.ok(ipam.dataDir !== undefined, 'host-local leases never land on the node\'s default dir');
      }
    }), { seed: SEED, numRuns: 2000 });
  });
});
