// What an operator sees of a running daemon: spans (in-memory exporter), Prometheus metrics,
// and one JSON log line per attach / detach outcome.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as prom from 'prom-client';
import { BufferedHistogram, FLUSH_MS, parseMetricsAddr } from '../plugin/observe/metrics';
import { registry } from '../plugin/observe/metrics';
import { tracingEnabled, tracingRequested, withSpan } from '../plugin/observe/tracing';
import { packageRoot } from '../plugin/server/protos';
import { cni } from './helpers/cni-exec';
import { rejectsWith } from './helpers/expect';
import { inNetns, sh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

interface SpanOut { name: string; traceId: string; spanId: string; parentSpanId: string; attributes: Record<string, unknown>; status: number }

describe('observability', () => {
  let d: TestDaemon;
  let spansFile: string;
  before(async () => {
    spansFile = `/tmp/kni-spans-${process.pid}-${Date.now()}.json`;
    // No repair on the kernel's notice: /readyz is asked while the bridge is down.
    d = await TestDaemon.start({ ranges: ['10.96.0.0/24'], repairOnNotice: false }, {
      script: path.join(packageRoot(), 'dist/test/helpers/traced-daemon.js'),
      args: ['--metrics-addr', '127.0.0.1:9273'],
      env: { KNI_TEST_SPANS_FILE: spansFile },
    });
  });
  after(() => {
    d?.cleanup();
    fs.rmSync(spansFile, { force: true });
  });

  async function spans(): Promise<SpanOut[]> {
    fs.rmSync(spansFile, { force: true });
    d.proc!.kill('SIGUSR2');
    await waitFor(() => fs.existsSync(spansFile), 20_000, () => 'no spans file after SIGUSR2');
    return JSON.parse(fs.readFileSync(spansFile, 'utf8'));
  }

  const scrape = (urlPath = '/metrics') => inNetns(d.nodeNetns, 'curl', ['-s', '-w', '\n%{http_code}', `http://127.0.0.1:9273${urlPath}`]).out;
  const sample = (text: string, series: string): number => {
    const line = text.split('\n').find((l) => l.startsWith(`${series} `));
    assert.ok(line, `no ${series} in\n${text.split('\n').filter((l) => l.startsWith(series.split('{')[0])).join('\n')}`);
    return Number(line.split(' ')[1]);
  };

  it('an Attach RPC is one span with a child per step, carrying sandbox, pod and entry point', async () => {
    await d.rt().Attach({ sandbox_id: 'traced', netns_path: d.makePodNetns('traced'), pod: { name: 'web', namespace: 'shop', uid: 'u1' } });
    const all = await spans();
    const rpc = all.find((s) => s.name === 'kni.runtime.v1.NetworkRuntime/Attach');
    assert.ok(rpc, `no RPC span among ${all.map((s) => s.name).join(', ')}`);
    assert.equal(rpc.parentSpanId, '');
    assert.equal(rpc.attributes['rpc.method'], 'Attach');
    const attach = all.find((s) => s.name === 'kni.attach' && s.parentSpanId === rpc.spanId);
    assert.ok(attach, 'kni.attach is not a child of the RPC span');
    assert.deepEqual(
      [attach.attributes['kni.sandbox.id'], attach.attributes['k8s.pod.name'], attach.attributes['k8s.namespace.name'], attach.attributes['kni.entry_point']],
      ['traced', 'web', 'shop', 'kni'],
    );
    const steps = all.filter((s) => s.parentSpanId === attach.spanId).map((s) => s.name);
    assert.deepEqual(steps, ['netns.open', 'ipam.allocate', 'store.record', 'veth.create', 'pod.addresses', 'source.check', 'store.commit']);
    assert.ok(all.filter((s) => s.traceId === rpc.traceId).every((s) => s.status !== 2), 'a step failed');
    const addrs = all.find((s) => s.name === 'pod.addresses' && s.parentSpanId === attach.spanId)!;
    assert.match(String(addrs.attributes['kni.addresses']), /10\.96\.0\.\d+\/32/);
  });

  it('the CNI path and a failed attach show up as spans too', async () => {
    const id = 'traced-cni';
    const r = cni('ADD', { CNI_CONTAINERID: id, CNI_NETNS: d.makePodNetns(id), CNI_IFNAME: 'eth0', CNI_ARGS: 'K8S_POD_NAME=api;K8S_POD_NAMESPACE=shop' }, { cniVersion: '1.0.0', name: 'kni', socket: d.cniSocket });
    assert.equal(r.code, 0, r.raw);
    await rejectsWith(d.rt().Attach({ sandbox_id: 'a/b', netns_path: '/run/netns/x' }), grpc.status.INVALID_ARGUMENT, /sandbox id/);
    const all = await spans();
    const root = all.find((s) => s.name === 'cni ADD');
    assert.ok(root);
    const attach = all.find((s) => s.name === 'kni.attach' && s.parentSpanId === root.spanId);
    assert.equal(attach?.attributes['kni.entry_point'], 'cni');
    assert.equal(attach?.attributes['k8s.pod.name'], 'api');
    const failed = all.find((s) => s.name === 'kni.attach' && s.attributes['kni.sandbox.id'] === 'a/b');
    assert.equal(failed?.status, 2, 'the failed attach span is not marked as an error');
    assert.equal(failed?.attributes['kni.error.code'], 'INVALID_ARGUMENT');
  });

  it('serves Prometheus metrics: latency by entry point, errors by code, pods, IPAM, GC, NRI', async () => {
    let m = scrape();
    assert.match(m, /\n200$/);
    assert.equal(sample(m, 'kni_attach_duration_seconds_count{entry_point="kni"}'), 1);
    assert.equal(sample(m, 'kni_attach_duration_seconds_count{entry_point="cni"}'), 1);
    assert.equal(sample(m, 'kni_errors_total{entry_point="kni",operation="attach",code="INVALID_ARGUMENT"}'), 1);
    assert.equal(sample(m, 'kni_rpc_errors_total{service="kni.runtime.v1.NetworkRuntime",method="Attach",code="INVALID_ARGUMENT"}'), 1);
    assert.equal(sample(m, 'kni_pods_attached'), 2);
    assert.equal(sample(m, 'kni_network_interfaces{network="kni"}'), 2);
    assert.equal(sample(m, 'kni_ipam_addresses{range="10.96.0.0/24",state="used"}'), 2);
    assert.equal(sample(m, 'kni_ipam_addresses{range="10.96.0.0/24",state="free"}'), 251);
    assert.equal(sample(m, 'kni_nri_connected'), 0);
    // Each step of the two attaches, by its span name (the failed one stopped at validation).
    for (const step of ['netns.open', 'ipam.allocate', 'store.record', 'veth.create', 'pod.addresses', 'store.commit']) {
      assert.equal(sample(m, `kni_step_duration_seconds_count{step="${step}"}`), 2, step);
    }
    assert.equal(sample(m, 'kni_step_duration_seconds_count{step="kni.runtime.v1.NetworkRuntime/Attach"}'), 2);
    assert.ok(sample(m, 'kni_step_duration_seconds_sum{step="veth.create"}') > 0);
    assert.ok(sample(m, 'kni_process_resident_memory_bytes') > 10e6);
    const commit = JSON.parse(fs.readFileSync(path.join(packageRoot(), 'dist/build-info.json'), 'utf8')).commit;
    assert.equal(sample(m, `kni_build_info{version="0.1.0",commit="${commit}"}`), 1);

    const gc = await d.rt().GarbageCollect({ live_sandbox_ids: ['traced'] });
    assert.deepEqual(gc.released_sandbox_ids, ['traced-cni']);
    await d.rt().Detach({ sandbox_id: 'traced' });
    m = scrape();
    assert.equal(sample(m, 'kni_gc_released_total{object="sandbox"}'), 1);
    assert.equal(sample(m, 'kni_detach_duration_seconds_count{entry_point="gc"}'), 1);
    assert.equal(sample(m, 'kni_detach_duration_seconds_count{entry_point="kni"}'), 1);
    assert.equal(sample(m, 'kni_pods_attached'), 0);
    assert.doesNotMatch(m, /^kni_network_interfaces\{/m, 'a series for a network no pod uses');
    assert.match(scrape('/other'), /^served here: GET \/metrics, \/livez, \/readyz\n\n404$/);
  });

  it('answers a kubelet\'s probes on the metrics address: /livez, and /readyz with the reason while the node cannot take pods', () => {
    assert.equal(scrape('/livez'), 'ok\n\n200');
    assert.equal(scrape('/readyz'), 'ready\n\n200');
    const bridge = 'kni0';
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', bridge, 'down']);
    try {
      assert.equal(scrape('/readyz'), `not ready: bridge ${bridge} is down\n\n503`);
      assert.equal(scrape('/livez'), 'ok\n\n200');
    } finally {
      sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', bridge, 'up']);
    }
    assert.equal(scrape('/readyz'), 'ready\n\n200');
  });

  it('a metrics address in use stops a start before the node network is touched, naming the flag', () => {
    // This node netns's 127.0.0.1:9273 is the running daemon's.
    fs.writeFileSync(`${d.dir}/busy.json`, JSON.stringify({ bridge: 'knibusy0', cni: { socket: `${d.dir}/busy-cni.sock` } }));
    const r = spawnSync('nsenter', [`--net=${d.nodeNetns}`, process.execPath, path.join(packageRoot(), 'dist/plugin/main.js'), '--config', `${d.dir}/busy.json`, '--socket', `${d.dir}/busy.sock`, '--state-dir', `${d.dir}/busy`, '--metrics-addr', '127.0.0.1:9273'], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /^kni-runtime: --metrics-addr 127\.0\.0\.1:9273: listen EADDRINUSE/m);
    assert.ok(!inNetns(d.nodeNetns, 'ip', ['link', 'show', 'knibusy0']).ok, 'the bridge was made before the metrics address was found taken');
  });

  it('logs one JSON line per attach and detach outcome, with sandbox, pod, entry point and duration', () => {
    const lines = d.output.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    const ok = lines.find((l) => l.msg === 'attach' && l.sandbox === 'traced');
    assert.ok(ok, 'no attach line');
    assert.equal(ok.pod, 'shop/web');
    assert.equal(ok.entry, 'kni');
    assert.equal(ok.level, 'info');
    assert.equal(typeof ok.ms, 'number');
    assert.match(String(ok.ms), /^\d+(\.\d{1,3})?$/, 'a duration to the microsecond');
    assert.ok(lines.some((l) => l.msg === 'attach' && l.sandbox === 'traced-cni' && l.entry === 'cni'));
    const bad = lines.find((l) => l.msg === 'attach failed' && l.sandbox === 'a/b');
    assert.equal(bad?.code, 'INVALID_ARGUMENT');
    assert.match(String(bad?.ms), /^\d+(\.\d{1,3})?$/);
    assert.ok(lines.some((l) => l.msg === 'detach' && l.sandbox === 'traced-cni' && l.entry === 'gc'));
  });

  it('--log-level warn drops the info lines; a bad --metrics-addr stops the start with the reason', async () => {
    const q = await TestDaemon.start({ ranges: ['10.97.0.0/24'] }, { args: ['--log-level', 'warn'] });
    try {
      await q.rt().Attach({ sandbox_id: 'quiet', netns_path: q.makePodNetns('quiet') });
      await q.rt().Detach({ sandbox_id: 'quiet' });
      assert.doesNotMatch(q.output, /"level":"info"/);
    } finally {
      q.cleanup();
    }
    await assert.rejects(TestDaemon.start({}, { args: ['--metrics-addr', 'localhost'] }), /--metrics-addr "localhost" is not host:port/);
  });

  it('OTEL_TRACES_EXPORTER starts the OpenTelemetry Node SDK with that exporter', async () => {
    const t = await TestDaemon.start({ ranges: ['10.98.0.0/24'] }, { env: { OTEL_TRACES_EXPORTER: 'console' } });
    try {
      await t.rt().Attach({ sandbox_id: 'console', netns_path: t.makePodNetns('console') });
      await waitFor(() => /name: 'kni\.attach'/.test(t.output), 20_000, () => t.output.slice(-2000));
      assert.match(t.output, /"msg":"tracing on","exporter":"console"/);
      assert.match(t.output, /name: 'kni\.attach'/);
      assert.match(t.output, /name: 'veth\.create'/);
      await t.rt().Detach({ sandbox_id: 'console' });
    } finally {
      t.cleanup();
    }
  });

  it('tracing is off unless OTEL_* asks for it; metrics addresses are checked', () => {
    assert.equal(tracingRequested({}), false);
    assert.equal(tracingRequested({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x:4317' }), false);
    assert.equal(tracingRequested({ OTEL_TRACES_EXPORTER: 'console' }), true);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4317' }), true);
    assert.deepEqual(parseMetricsAddr('[::1]:9273'), { host: '::1', port: 9273 });
    for (const bad of ['9273', ':9273', '127.0.0.1:0', '127.0.0.1:70000', 'a b:1']) assert.throws(() => parseMetricsAddr(bad), /not host:port/);
  });

  it('times every step without tracing too (kni_step_duration_seconds), failed ones included', async () => {
    assert.equal(tracingEnabled(), false);
    const count = async (step: string) => {
      const m = await registry.getSingleMetricAsString('kni_step_duration_seconds');
      return Number(new RegExp(`^kni_step_duration_seconds_count\\{step="${step.replace(/\./g, '\\.')}"\\} (\\d+)$`, 'm').exec(m)?.[1] ?? 0);
    };
    const step = `test.step.${process.pid}`;
    assert.equal(withSpan(step, {}, () => 7), 7);
    assert.throws(() => withSpan(step, {}, () => { throw new Error('sync failure'); }), /sync failure/);
    assert.equal(await withSpan(step, {}, async () => 8), 8);
    await assert.rejects(withSpan(step, {}, async () => { throw new Error('async failure'); }), /async failure/);
    assert.equal(await count(step), 4);
  });

  it('a buffered histogram reads as prom-client\'s own: every observation counted, summed and bucketed, however many wait', async () => {
    const name = `kni_test_buffered_${process.pid}_seconds`;
    const h = new BufferedHistogram(name, 'test', 'step');
    const own = new prom.Registry();
    const plain = new prom.Histogram({ name, help: 'test', labelNames: ['step'], buckets: [0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1], registers: [own] });
    try {
      // More than the 4096 one label value keeps waiting: those go on at once.
      for (let i = 0; i < 5000; i++) {
        const v = (i % 97) / 10000;
        h.of(i % 10 ? 'a' : 'b').observe(v);
        plain.observe({ step: i % 10 ? 'a' : 'b' }, v);
      }
      const text = await registry.getSingleMetricAsString(name);
      assert.match(text, /_count\{step="a"\} \d+/);
      const lines = (t: string) => t.split('\n').sort();
      assert.deepEqual(lines(text), lines(await own.getSingleMetricAsString(name)));
      h.of('a').observe(0.0001);
      assert.match(await registry.getSingleMetricAsString(name), new RegExp(`_count\\{step="a"\\} ${Number(/_count\{step="a"\} (\d+)/.exec(text)![1]) + 1}`));
      // Unread, they are handed on by a timer, not by the call that made them.
      h.of('b').observe(0.002);
      assert.equal(h.of('b').waiting, 1);
      await new Promise((r) => setTimeout(r, FLUSH_MS + 100));
      assert.equal(h.of('b').waiting, 0);
    } finally {
      registry.removeSingleMetric(name);
    }
  });
});
