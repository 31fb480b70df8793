// The restart policy every Kubernetes watch of kni shares (plugin/kube/watch-restart.ts): the
// retry delays, the log lines, the metric. The watch here is a function that fails or succeeds
// as told; what a real API server going away does to each watch is in the cluster tests
// (test/cluster/node-agent.cluster.ts, the API server outage).
import assert from 'node:assert/strict';
import { WatchRestart } from '../plugin/kube/watch-restart';
import { watchRestartsTotal } from '../plugin/observe/metrics';
import { waitFor } from './helpers/wait';

/** Log lines written while fn runs (they go to stdout, as the daemon's do). */
function captureLog(): { lines: Record<string, unknown>[]; stop(): void } {
  const lines: Record<string, unknown>[] = [];
  const write = process.stdout.write;
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const text = String(chunk);
    if (text.startsWith('{"time"')) {
      for (const l of text.trim().split('\n')) lines.push(JSON.parse(l));
      return true;
    }
    return (write as (...a: unknown[]) => boolean).call(process.stdout, chunk, ...rest);
  }) as typeof process.stdout.write;
  return { lines, stop: () => (process.stdout.write = write) };
}

/** An informer whose start() does what `run` says; its error listener is what WatchRestart set. */
function informer(run: (emitError: (e: unknown) => void) => Promise<void>): { start(): Promise<void>; stop(): Promise<void>; on(verb: 'error', cb: (e: unknown) => void): void; stopped: number } {
  let onError: (e: unknown) => void = () => undefined;
  const w = {
    stopped: 0,
    start: () => run((e) => onError(e)),
    stop: async () => void w.stopped++,
    on: (_verb: 'error', cb: (e: unknown) => void) => void (onError = cb),
  };
  return w;
}

const restartsOf = async (resource: string): Promise<number> =>
  (await watchRestartsTotal.get()).values.find((v) => v.labels.resource === resource)?.value ?? 0;

describe('Kubernetes watches: restart policy', () => {
  it('retries sooner first, then later up to the cap; one log line per distinct failure, one when back', async () => {
    const log = captureLog();
    const calls: number[] = [];
    let fail: string | undefined = 'connect ECONNREFUSED 10.0.0.1:6443';
    let connected = 0;
    const delays: number[] = [];
    const resource = `test-${process.pid}`;
    const before = await restartsOf(resource);
    // The informer's way: a failed list or watch is an error event, and start() still resolves.
    const inf = informer(async (emitError) => {
      calls.push(performance.now());
      if (fail) emitError(new Error(fail));
    });
    const w = new WatchRestart(inf, {
      resource,
      what: 'Thing watch',
      fields: { thing: 'ns/x' },
      onBroke: (_e, retryInMs) => delays.push(retryInMs),
      onConnected: () => connected++,
      firstMs: 20,
      maxMs: 80,
    });
    try {
      w.begin();
      await waitFor(() => calls.length >= 6, 5000, () => `${calls.length} starts`);
      assert.deepEqual(delays.slice(0, 5), [20, 40, 80, 80, 80]);
      // Timers fire no sooner than asked (later, on a busy machine).
      const gaps = calls.slice(1).map((t, i) => t - calls[i]);
      for (const [i, want] of delays.slice(0, 5).entries()) assert.ok(gaps[i] >= want - 2, `retry ${i + 1} after ${gaps[i].toFixed(1)} ms, want ≥ ${want}`);
      assert.equal(connected, 0);
      assert.equal(w.lastError, 'connect ECONNREFUSED 10.0.0.1:6443');
      assert.ok(w.restarts >= 6 && delays.length === w.restarts);
      const warns = log.lines.filter((l) => l.level === 'warn');
      assert.equal(warns.length, 1, `one line for one failure repeated: ${JSON.stringify(warns)}`);
      assert.deepEqual({ ...warns[0], time: undefined }, { time: undefined, level: 'warn', msg: 'Thing watch broke; starting it again', thing: 'ns/x', error: 'connect ECONNREFUSED 10.0.0.1:6443', retryInMs: 20 });

      fail = 'Unauthorized';
      await waitFor(() => log.lines.filter((l) => l.level === 'warn').length === 2, 5000, () => JSON.stringify(log.lines));
      fail = undefined;
      await waitFor(() => connected === 1, 5000, () => JSON.stringify(log.lines));
      assert.equal(w.lastError, '');
      const back = log.lines.find((l) => l.msg === 'Thing watch is back');
      assert.ok(back, JSON.stringify(log.lines));
      assert.equal(back.thing, 'ns/x');
      assert.equal(await restartsOf(resource), before + w.restarts);

      // Up again: the next failure is retried after the first delay, and logged even if it is the same as before.
      const n = calls.length;
      fail = 'connect ECONNREFUSED 10.0.0.1:6443';
      w.broke(new Error(fail));
      assert.equal(delays.at(-1), 20);
      await waitFor(() => calls.length > n, 5000, () => `${calls.length} starts`);
      const again = log.lines.filter((l) => l.level === 'warn' && String(l.error).includes('ECONNREFUSED'));
      assert.equal(again.length, 2);
      assert.equal(again[1].retryInMs, 20);
    } finally {
      w.stop();
      log.stop();
    }
    const stoppedAt = calls.length;
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(calls.length, stoppedAt, 'a stopped watch was started again');
    assert.equal(inf.stopped, 1, 'stop() stops the informer');
  });

  it('a start() that rejects is a failure too; describe() words the line; stop() during the wait ends it', async () => {
    const log = captureLog();
    let starts = 0;
    const w = new WatchRestart(informer(async () => {
      starts++;
      throw Object.assign(new Error('HTTP-Code: 404'), { code: 404, body: { message: 'the server could not find the requested resource' } });
    }), {
      resource: `test-${process.pid}-b`,
      what: 'Other watch',
      describe: (e) => `no such resource: ${e.includes('404')}`,
      firstMs: 30,
    });
    try {
      w.begin();
      await waitFor(() => starts >= 2, 5000, () => `${starts} starts`);
      assert.equal(log.lines.filter((l) => l.level === 'warn').length, 1);
      assert.equal(log.lines[0].msg, 'no such resource: true');
      w.stop();
      const stoppedAt = starts;
      await new Promise((r) => setTimeout(r, 150));
      assert.equal(starts, stoppedAt, 'started again after stop()');
    } finally {
      w.stop();
      log.stop();
    }
  });
});
