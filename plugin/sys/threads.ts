// The daemon's worker threads (wiring, veth reaper, netns pool): small heaps, never keeping the
// process up, and known while they still load their modules.
//
// Why the last: a thread stopped while koffi's addon initialises aborts the whole process
// (FATAL ERROR: Error::ThrowAsJavaScriptException napi_throw — node-addon-api treats a throw into
// a terminating environment as fatal, nodejs/node-addon-api#902). Measured here: a process that
// exits 31–39 ms after making a thread that loads koffi aborted in 6 of 168 runs, and a daemon
// SIGTERMed 40 ms after its first CreateNetwork in 2 of 30. So a thread is stopped, and the
// daemon exits, only once every thread has said it is loaded (or has gone).
import { parentPort, Worker } from 'node:worker_threads';

/**
 * V8's default heap sizes would add tens of MB of resident memory per thread for nothing: they
 * hold a few small buffers (measured: daemon RSS at 1000 pods 106 MB without threads, 162 MB
 * with two at the defaults).
 */
const WORKER_LIMITS = { maxYoungGenerationSizeMb: 2, maxOldGenerationSizeMb: 16, codeRangeSizeMb: 8 };

const LOADED = 'kni: thread loaded';
const loading = new Map<Worker, Promise<void>>();

/** A thread running file; unref'd: it never keeps the daemon up. */
export function startThread(file: string): Worker {
  const w = new Worker(file, { resourceLimits: WORKER_LIMITS });
  w.unref();
  const loaded = new Promise<void>((resolve) => {
    const done = () => {
      w.off('message', onMessage);
      loading.delete(w);
      resolve();
    };
    const onMessage = (m: unknown) => {
      if (m === LOADED) done();
    };
    w.on('message', onMessage);
    w.once('exit', done);
    w.once('error', done);
  });
  loading.set(w, loaded);
  return w;
}

/** Whether a message from a thread is its "loaded" (its owner ignores it). */
export const isLoadedMessage = (m: unknown): boolean => m === LOADED;

/** Called by a thread once its modules are loaded. */
export function threadLoaded(): void {
  parentPort?.postMessage(LOADED);
}

/** Settles once a thread's modules are loaded (or it is gone). */
export function whenLoaded(w: Worker): Promise<void> {
  return loading.get(w) ?? Promise.resolve();
}

/** Stops a thread once it is loaded. */
export function stopThread(w: Worker): void {
  void whenLoaded(w).then(() => w.terminate());
}

/** Resolves once no thread is still loading (before the daemon exits). */
export async function threadsLoaded(): Promise<void> {
  while (loading.size) await Promise.all(loading.values());
}
