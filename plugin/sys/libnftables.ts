// nft scripts run through libnftables (the library the nft command is made of) inside kni's
// process: one transaction per script, all of it or nothing, and no process spawned. Network
// policy writes a pod's chains and set elements with it inside the pod's attach, where a spawn
// of nft costs 5–10 ms and is barred from the attach path. The call runs on libuv's thread pool
// (koffi's async call) so a long script never holds the event loop; one at a time, since a
// libnftables context is not safe across threads.
import koffi from 'koffi';

type CFunction = ReturnType<ReturnType<typeof koffi.load>['func']>;

interface Lib {
  ctxNew: CFunction;
  bufferOutput: CFunction;
  bufferError: CFunction;
  getError: CFunction;
  run: CFunction;
}

let lib: Lib | undefined;
let ctx: unknown;
let queue: Promise<unknown> = Promise.resolve();

function load(): Lib {
  if (lib) return lib;
  let so: ReturnType<typeof koffi.load>;
  try {
    so = koffi.load('libnftables.so.1');
  } catch (e) {
    throw new Error(`libnftables.so.1 cannot be loaded (install nftables: it comes with the nft command): ${(e as Error).message}`);
  }
  lib = {
    ctxNew: so.func('void *nft_ctx_new(uint32_t flags)'),
    bufferOutput: so.func('int nft_ctx_buffer_output(void *ctx)'),
    bufferError: so.func('int nft_ctx_buffer_error(void *ctx)'),
    getError: so.func('const char *nft_ctx_get_error_buffer(void *ctx)'),
    run: so.func('int nft_run_cmd_from_buffer(void *ctx, const char *buf)'),
  };
  ctx = lib.ctxNew(0);
  if (!ctx) throw new Error('libnftables: nft_ctx_new failed');
  // Output and errors into buffers, read back per call, not onto kni's stdout and stderr.
  lib.bufferOutput(ctx);
  lib.bufferError(ctx);
  return lib;
}

function runOnce(script: string, what: string): Promise<void> {
  const l = load();
  return new Promise((resolve, reject) => {
    l.run.async(ctx, script, (err: unknown, rc: number) => {
      if (err) return reject(new Error(`nft could not write ${what}: ${String(err)}`));
      // Read even on success: the buffer is cleared only by reading it.
      const message = String(l.getError(ctx) ?? '').trim();
      if (rc !== 0) return reject(new Error(`nft could not write ${what}: ${message || `error ${rc}`}`));
      resolve();
    });
  });
}

/** Runs an nft script as one transaction; `what` names it in errors. Calls run one after another. */
export function nftRun(script: string, what: string): Promise<void> {
  const next = queue.then(() => runOnce(script, what));
  queue = next.catch(() => undefined);
  return next;
}
