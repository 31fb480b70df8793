// Watch and `knictl events`: pod network changes in order, each with a resume token; a watcher
// that reconnects with its last token misses nothing; nothing is lost under 16 attaches at
// once; repairs by reconcile show; stale and foreign tokens are refused precisely.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { Client, watchEvents } from '../plugin/client/clients';
import { runtimeService } from '../plugin/server/protos';
import { MAX_WATCHES, MAX_WATCHES_PER_CONNECTION } from '../plugin/server/watch';
import { inParallel } from './helpers/pool';
import { sh } from './helpers/sh';
import { KNICTL } from './helpers/knictl';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

interface Seen {
  events: any[];
  ended?: grpc.ServiceError | null;
  opened?: Promise<void>;
  close(): void;
}

describe('Watch: pod network events', () => {
  let d: TestDaemon;
  let rt: Client;
  before(async () => {
    d = await TestDaemon.start();
    rt = d.rt();
  });
  after(() => d?.cleanup());

  function watch(req: { resume_token?: string; sandbox_id?: string; mark_backlog_end?: boolean } = {}): Seen {
    const seen: Seen = { events: [], close: () => undefined };
    const w = watchEvents(d.socket, req, (e) => seen.events.push(e), (err) => (seen.ended = err ?? null));
    seen.close = () => w.close();
    seen.opened = w.opened;
    return seen;
  }
  const attach = (id: string) => rt.Attach({ sandbox_id: id, netns_path: d.makePodNetns(id), pod: { name: id, namespace: 'ev', uid: `u-${id}` } });
  const seqOf = (e: any) => Number(e.resume_token.split('-')[1]);

  it('attach and detach come in order, with interfaces and addresses and increasing tokens', async () => {
    const w = watch();
    try {
      await w.opened;
      const before = Date.now();
      const a = await attach('ev-a');
      await attach('ev-b');
      await rt.Detach({ sandbox_id: 'ev-a' });
      await waitFor(() => w.events.length >= 6, 10_000, () => JSON.stringify(w.events));
      assert.deepEqual(w.events.map((e) => [e.type, e.sandbox_id]), [
        ['attached', 'ev-a'], ['interface_added', 'ev-a'], ['attached', 'ev-b'], ['interface_added', 'ev-b'], ['interface_removed', 'ev-a'], ['detached', 'ev-a'],
      ]);
      assert.equal(w.events[0].interfaces[0].addresses[0].address, a.interfaces[0].addresses[0].address);
      assert.equal(w.events[1].interfaces.length, 1);
      assert.equal(w.events[1].interfaces[0].name, 'eth0');
      assert.deepEqual(w.events[0].pod, { name: 'ev-a', namespace: 'ev', uid: 'u-ev-a' });
      assert.match(w.events[0].time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      const at = Date.parse(w.events[0].time);
      assert.ok(at >= before && at <= Date.now(), `the attach's event is dated ${w.events[0].time}`);
      const seqs = w.events.map(seqOf);
      assert.ok(seqs.every((q, i) => i === 0 || q === seqs[i - 1] + 1));
    } finally {
      w.close();
    }
  });

  it('a watcher that reconnects with its last token gets exactly what happened meanwhile', async () => {
    const first = watch();
    await first.opened;
    await attach('ev-c');
    await waitFor(() => first.events.length === 2, 10_000, () => JSON.stringify(first.events));
    const token = first.events[1].resume_token;
    first.close();
    await attach('ev-d');
    await rt.Detach({ sandbox_id: 'ev-c' });
    const again = watch({ resume_token: token });
    try {
      await waitFor(() => again.events.length >= 4, 10_000, () => JSON.stringify(again.events));
      assert.deepEqual(again.events.map((e) => [e.type, e.sandbox_id]), [['attached', 'ev-d'], ['interface_added', 'ev-d'], ['interface_removed', 'ev-c'], ['detached', 'ev-c']]);
      assert.equal(seqOf(again.events[0]), seqOf(first.events[1]) + 1, 'an event fell between the two watches');
    } finally {
      again.close();
    }
  });

  it('16 attaches at once: every one seen once, in sequence; a sandbox filter sees only its own', async () => {
    const all = watch();
    const one = watch({ sandbox_id: 'ev-p7' });
    try {
      await Promise.all([all.opened, one.opened]);
      await inParallel(16, 16, (i) => attach(`ev-p${i}`));
      await waitFor(() => all.events.length >= 32, 20_000, () => `${all.events.length} events`);
      assert.deepEqual(all.events.filter((e) => e.type === 'attached').map((e) => e.sandbox_id).sort(), Array.from({ length: 16 }, (_, i) => `ev-p${i}`).sort());
      const seqs = all.events.map(seqOf);
      assert.ok(seqs.every((s, i) => i === 0 || s === seqs[i - 1] + 1), `gaps or disorder: ${seqs.join(',')}`);
      assert.deepEqual(one.events.map((e) => [e.type, e.sandbox_id]), [['attached', 'ev-p7'], ['interface_added', 'ev-p7']]);
    } finally {
      all.close();
      one.close();
    }
  });

  it('reconcile repairing a pod shows as "repaired" with what it found, and restored addresses as "address_changed"', async () => {
    const w = watch({ sandbox_id: 'ev-p3' });
    try {
      await w.opened;
      const p = await rt.GetPod({ sandbox_id: 'ev-p3' });
      sh('ip', ['-n', d.nodeNetnsName, 'link', 'del', p.interfaces[0].host_interface]);
      await rt.Reconcile({});
      await waitFor(() => w.events.some((e) => e.type === 'repaired'), 10_000, () => JSON.stringify(w.events));
      assert.match(w.events.find((e) => e.type === 'repaired').message, /missing/);
      sh('ip', ['netns', 'exec', p.netns_path.split('/').pop()!, 'ip', 'addr', 'flush', 'dev', 'eth0', 'scope', 'global']);
      await rt.Reconcile({});
      await waitFor(() => w.events.some((e) => e.type === 'address_changed'), 10_000, () => JSON.stringify(w.events));
    } finally {
      w.close();
    }
  });

  it('asked, the end of what is past is marked (backlog_end, the newest token then); live events follow it, and resuming from the mark gives only those', async () => {
    const w = watch();
    await w.opened;
    await attach('ev-m1');
    await waitFor(() => w.events.length === 2, 10_000, () => JSON.stringify(w.events));
    w.close();
    await attach('ev-m2');
    const marked = watch({ resume_token: w.events[1].resume_token, mark_backlog_end: true });
    const unmarked = watch({ resume_token: w.events[1].resume_token });
    try {
      await waitFor(() => marked.events.length === 3 && unmarked.events.length === 2, 10_000, () => JSON.stringify(marked.events));
      assert.deepEqual(marked.events.map((e) => [e.type, e.sandbox_id]), [['attached', 'ev-m2'], ['interface_added', 'ev-m2'], ['backlog_end', '']]);
      assert.equal(marked.events[2].resume_token, marked.events[1].resume_token, "the mark carries the newest event's token");
      assert.deepEqual(unmarked.events.map((e) => e.type), ['attached', 'interface_added'], 'only those who ask get the mark');
      await rt.Detach({ sandbox_id: 'ev-m2' });
      await waitFor(() => marked.events.length === 5, 10_000, () => JSON.stringify(marked.events));
      assert.deepEqual(marked.events.slice(3).map((e) => e.type), ['interface_removed', 'detached']);
      // From now on (no token): nothing past, so the mark comes first, with the newest token.
      const fresh = watch({ mark_backlog_end: true });
      try {
        await waitFor(() => fresh.events.length === 1, 10_000, () => JSON.stringify(fresh.events));
        assert.deepEqual([fresh.events[0].type, fresh.events[0].resume_token], ['backlog_end', marked.events[4].resume_token]);
      } finally {
        fresh.close();
      }
      const resumed = watch({ resume_token: marked.events[2].resume_token });
      try {
        await waitFor(() => resumed.events.length === 2, 10_000, () => JSON.stringify(resumed.events));
        assert.deepEqual(resumed.events.map((e) => e.type), ['interface_removed', 'detached']);
      } finally {
        resumed.close();
      }
    } finally {
      marked.close();
      unmarked.close();
    }
  });

  it('knictl events --since prints what came after the token, one line per event, and ends at kni\'s mark (not after a pause)', async () => {
    const w = watch();
    await w.opened;
    await attach('ev-k1');
    await waitFor(() => w.events.length === 2, 10_000, () => JSON.stringify(w.events));
    w.close();
    await attach('ev-k2');
    const out = await new Promise<string>((resolve) => {
      const p = spawn(process.execPath, [KNICTL, '--socket', d.socket, 'events', '--since', w.events[1].resume_token, '-o', 'json'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let s = '';
      p.stdout.on('data', (b) => (s += b));
      p.stderr.on('data', (b) => (s += b));
      p.on('exit', () => resolve(s));
    });
    const lines = out.trim().split('\n').map((l) => JSON.parse(l));
    assert.deepEqual(lines.map((e) => [e.type, e.sandbox_id]), [['attached', 'ev-k2'], ['interface_added', 'ev-k2']]);
    // Nothing after the token: it ends at once, printing nothing.
    const none = spawnSync(process.execPath, [KNICTL, '--socket', d.socket, 'events', '--since', lines[1].resume_token], { encoding: 'utf8', timeout: 20_000 });
    assert.deepEqual([none.status, none.stdout], [0, '']);
  });

  it('knictl events --since against a kni from before the mark: ends after 5 s without an event, what was sent printed', async function () {
    this.timeout(30_000);
    const sock = `${d.dir}/old-kni.sock`;
    const server = new grpc.Server();
    let asked: any;
    server.addService(runtimeService().service, {
      Watch: (call: grpc.ServerWritableStream<any, unknown>) => {
        asked = call.request;
        call.write({ resume_token: 'aaaaaaaaaaaa-2', type: 'attached', sandbox_id: 'old1', interfaces: [], time: '2026-11-27T00:00:00.000Z' });
        // …and nothing more, the stream left open, as a kni that ignores mark_backlog_end.
      },
    });
    await new Promise<void>((resolve, reject) => server.bindAsync(`unix://${sock}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
    try {
      const started = Date.now();
      const out = await new Promise<{ status: number | null; stdout: string }>((resolve) => {
        const p = spawn(process.execPath, [KNICTL, '--socket', sock, 'events', '--since', 'aaaaaaaaaaaa-1', '-o', 'json'], { stdio: ['ignore', 'pipe', 'inherit'] });
        let s = '';
        p.stdout.on('data', (b) => (s += b));
        p.on('exit', (status) => resolve({ status, stdout: s }));
      });
      assert.equal(out.status, 0);
      assert.deepEqual(out.stdout.trim().split('\n').map((l) => JSON.parse(l).sandbox_id), ['old1']);
      assert.ok(Date.now() - started >= 5000, 'ended before the quiet time');
      assert.equal(asked.mark_backlog_end, true);
    } finally {
      server.forceShutdown();
    }
  });

  it(`watchers that resume from the oldest event and never read: at most ${MAX_WATCHES_PER_CONNECTION} a connection and ${MAX_WATCHES} in all, kni's memory bounded, other callers answered in their normal time; a reader gets the whole log`, async function () {
    this.timeout(240_000);
    // A backlog of a few thousand events.
    await inParallel(8, 600, async (i) => {
      await rt.Attach({ sandbox_id: `ev-b${i}`, netns_path: d.makePodNetns(`ev-b${i}`), pod: { name: `ev-b${i}`, namespace: 'ev', uid: `u-${i}` } });
      await rt.Detach({ sandbox_id: `ev-b${i}` });
    });
    const probe = watch({ mark_backlog_end: true });
    await waitFor(() => probe.events.length === 1, 10_000, () => JSON.stringify(probe.events));
    probe.close();
    const newest = probe.events[0].resume_token as string;
    const oldest = `${newest.split('-')[0]}-0`;
    const total = Number(newest.split('-')[1]);
    assert.ok(total >= 1800, `${total} events`);
    const rss = () => Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${d.proc!.pid}/status`, 'utf8'))![1]) / 1024;
    const before = rss();
    const Ctor = runtimeService();
    const channels: grpc.Client[] = [];
    const calls: grpc.ClientReadableStream<unknown>[] = [];
    const streams: { opened: boolean; error?: grpc.ServiceError }[] = [];
    /** One connection (a channel) with n Watch streams that never read. */
    const open = (n: number): void => {
      // A connection of its own (grpc-js shares one between channels to the same address otherwise).
      const raw = new Ctor(`unix://${d.socket}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
      channels.push(raw);
      for (let i = 0; i < n; i++) {
        const st: { opened: boolean; error?: grpc.ServiceError } = { opened: false };
        streams.push(st);
        const call = (raw as any).Watch({ resume_token: oldest }) as grpc.ClientReadableStream<unknown>;
        call.once('metadata', () => (st.opened = true));
        call.on('error', (e: grpc.ServiceError) => (st.error = e));
        call.pause();
        calls.push(call);
      }
    };
    try {
      open(20);
      await waitFor(() => streams.filter((x) => x.opened || x.error).length === 20, 20_000, () => JSON.stringify(streams.map((x) => x.error?.code)));
      const refused = streams.filter((x) => x.error);
      assert.equal(refused.length, 20 - MAX_WATCHES_PER_CONNECTION);
      for (const r of refused) {
        assert.equal(r.error!.code, grpc.status.RESOURCE_EXHAUSTED);
        assert.match(r.error!.details, /too many Watch streams: 8 on this connection \(at most 8\)/);
      }
      for (let c = 0; c < 10; c++) open(MAX_WATCHES_PER_CONNECTION);
      await waitFor(() => streams.filter((x) => x.opened || x.error).length === streams.length, 30_000, () => `${streams.filter((x) => x.opened).length} open`);
      const opened = streams.filter((x) => x.opened && !x.error).length;
      assert.equal(opened, MAX_WATCHES, `${opened} Watch streams open`);
      // Meanwhile another client's calls answer in their normal time.
      const other = d.rt();
      for (let i = 0; i < 20; i++) {
        const t0 = performance.now();
        assert.equal((await other.GetNode({})).ready, true);
        const ms = performance.now() - t0;
        assert.ok(ms < 1000, `GetNode took ${Math.round(ms)} ms beside ${opened} unread watchers`);
      }
      const grew = rss() - before;
      assert.ok(grew < 100, `kni grew by ${Math.round(grew)} MB for ${opened} unread watchers of ${total} events`);
    } finally {
      for (const c of calls) c.cancel();
      for (const c of channels) c.close();
    }
    // The streams end with their calls: a reader from the oldest event gets every one, then the mark.
    const all = watch({ resume_token: oldest, mark_backlog_end: true });
    try {
      await waitFor(() => all.events.at(-1)?.type === 'backlog_end', 60_000, () => `${all.events.length} events (${all.ended?.details ?? ''})`);
      assert.equal(all.events.length, total + 1);
      assert.deepEqual(all.events.slice(0, -1).map(seqOf), Array.from({ length: total }, (_, i) => i + 1));
    } finally {
      all.close();
    }
  });

  it('tokens: garbage is INVALID_ARGUMENT; one from before a restart is FAILED_PRECONDITION (list again)', async () => {
    const bad = watch({ resume_token: 'nope' });
    await waitFor(() => bad.ended !== undefined, 10_000, () => 'no answer');
    assert.equal(bad.ended?.code, grpc.status.INVALID_ARGUMENT);
    const w = watch();
    await w.opened;
    await attach('ev-r');
    await waitFor(() => w.events.length >= 1, 10_000, () => JSON.stringify(w.events));
    w.close();
    await d.restart('SIGKILL');
    rt = d.rt();
    const old = watch({ resume_token: w.events[0].resume_token });
    await waitFor(() => old.ended !== undefined, 10_000, () => 'no answer');
    assert.equal(old.ended?.code, grpc.status.FAILED_PRECONDITION);
    assert.match(old.ended!.details, /kni restarted/);
  });
});
