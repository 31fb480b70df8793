// Hostile input, property-based (fast-check): every RPC of both APIs with random and malformed
// messages, raw garbage bytes, and the CNI shim with random environment and stdin. Only precise
// errors; the daemon stays up and what it holds is intact.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import * as grpc from '@grpc/grpc-js';
import fc from 'fast-check';

/** fast-check with its report cut short: a counterexample can hold a megabyte of "A". */
async function check(p: fc.IAsyncProperty<any> | fc.IProperty<any>, params: fc.Parameters<any>): Promise<void> {
  const r = await fc.check(p as fc.IAsyncProperty<any>, params);
  if (r.failed) {
    const ex = JSON.stringify(r.counterexample).slice(0, 600);
    throw new Error(`property failed after ${r.numRuns} runs (seed ${r.seed}, path ${r.counterexamplePath}): ${String((r.errorInstance as Error)?.message ?? r.errorInstance).slice(0, 1500)}\ncounterexample (cut): ${ex}`);
  }
}
import { kniService, runtimeService } from '../plugin/server/protos';
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

/** A random message for a proto-loader type: every field, hostile values, maps and nesting. */
function messageArb(type: any): fc.Arbitrary<Record<string, unknown>> {
  const fields: Record<string, fc.Arbitrary<unknown>> = {};
  for (const f of type.field as any[]) {
    let v: fc.Arbitrary<unknown>;
    const nested = f.typeName ? (type.nestedType as any[]).find((n) => f.typeName.endsWith(`.${n.name}`)) : undefined;
    if (nested?.options?.mapEntry) v = fc.dictionary(hostileString, hostileString, { maxKeys: 20 });
    else if (f.type === 'TYPE_STRING') v = hostileString;
    else if (f.type === 'TYPE_BOOL') v = fc.boolean();
    else if (/INT|FIXED/.test(f.type)) v = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }).map((n) => Math.abs(n));
    else if (f.type === 'TYPE_ENUM') v = fc.integer({ min: 0, max: 3 });
    else if (f.type === 'TYPE_MESSAGE') v = fc.constant({}); // an empty nested message: its defaults
    else continue;
    fields[f.name] = f.label === 'LABEL_REPEATED' && !nested?.options?.mapEntry ? fc.array(v, { maxLength: 5 }) : v;
  }
  return fc.record(fields, { requiredKeys: [] });
}

// Precise answers: what a bad request may get. INTERNAL, UNKNOWN or UNAVAILABLE mean a bug.
const PRECISE = new Set([grpc.status.INVALID_ARGUMENT, grpc.status.NOT_FOUND, grpc.status.ALREADY_EXISTS, grpc.status.RESOURCE_EXHAUSTED, grpc.status.FAILED_PRECONDITION, grpc.status.UNIMPLEMENTED]);

describe('hostile input (fast-check)', () => {
  let d: TestDaemon;
  let keep: any;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.65.0.0/24', 'fd00:65::/64'] });
    keep = await d.rt().Attach({ sandbox_id: 'keep', netns_path: d.makePodNetns('keep'), pod: { name: 'keep', namespace: 'fuzz' } });
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
          let arb = messageArb(m.requestType.type);
          // A GC with a live list of valid ids would (rightly) release "keep": keep one bad id in it.
          if (method === 'GarbageCollect') arb = arb.map((r) => ({ ...r, live_sandbox_ids: ['a/b', ...((r.live_sandbox_ids as string[]) ?? [])] }));
          await check(fc.asyncProperty(arb, async (req) => {
            const err = await new Promise<grpc.ServiceError | null>((resolve) => (client as any)[method](req, { deadline: Date.now() + 10_000 }, (e: grpc.ServiceError | null) => resolve(e)));
            if (!err) return;
            if (!seen.has(method)) seen.set(method, new Set());
            seen.get(method)!.add(grpc.status[err.code]);
            assert.ok(PRECISE.has(err.code), `${method} answered ${grpc.status[err.code]}: ${err.details}\nrequest: ${JSON.stringify(req).slice(0, 500)}`);
            assert.ok(err.details && err.details.length < 2000, `${method}: empty or unbounded message`);
          }), { numRuns: 40, seed: 4410 });
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
            const err = await new Promise<grpc.ServiceError | null>((resolve) =>
              client.makeUnaryRequest(`/${name}/${method}`, (b: Buffer) => b, (b: Buffer) => b, Buffer.from(bytes), (e) => resolve(e)));
            if (err) assert.notEqual(err.code, grpc.status.UNAVAILABLE, `${method}: ${err.details}`);
          }), { numRuns: 15, seed: 4410 });
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
    }), { numRuns: 250, seed: 4410 });
  });

  it('afterwards the daemon serves and what it held is intact', async () => {
    const rt = d.rt();
    assert.equal((await rt.GetNode({})).ready, true);
    const now = await rt.GetPod({ sandbox_id: 'keep' });
    assert.deepEqual(now.interfaces, keep.interfaces);
    assert.deepEqual((await rt.Check({ sandbox_id: 'keep' })).problems, []);
    assert.match(d.output, /"msg":"attach failed"/);
  });
});
