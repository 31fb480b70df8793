// nft scripts run through libnftables (the library the nft command is made of) inside kni's
// process: one transaction per script, all of it or nothing, and no process spawned. Network
// policy writes a pod's chains and set elements with it inside the pod's attach, where a spawn
// of nft costs 5–10 ms and is barred from the attach path. The call runs on libuv's thread pool
// (koffi's async call) so a long script never holds the event loop; one at a time per context,
// since a libnftables context is not safe across threads. A context made while the thread is in
// a pod's netns keeps talking to that netns (its netlink socket is opened there): MultiNetwork
// policy writes its table inside pods with one.
import koffi from 'koffi';

type CFunction = ReturnType<ReturnType<typeof koffi.load>['func']>;

interface Lib {
  ctxNew: CFunction;
  bufferOutput: CFunction;
  bufferError: CFunction;
  getError: CFunction;
  run: CFunction;
  ctxFree: CFunction;
}

let lib: Lib | undefined;

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
    ctxFree: so.func('void nft_ctx_free(void *ctx)'),
  };
  return lib;
}

/** One libnftables context: scripts run on it one after another, in the netns it was made in. */
export class NftContext {
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  /** Made in the calling thread's netns now (inNetns(fd, () => new NftContext()) for a pod's). */
  constructor(private readonly lib = load(), private readonly ctx: unknown = lib.ctxNew(0)) {
    if (!ctx) throw new Error('libnftables: nft_ctx_new failed');
    // Output and errors into buffers, read back per call, not onto kni's stdout and stderr.
    lib.bufferOutput(ctx);
    lib.bufferError(ctx);
  }

  /** Runs an nft script as one transaction; `what` names it in errors. */
  run(script: string, what: string): Promise<void> {
    if (this.closed) return Promise.reject(new Error(`nft could not write ${what}: its context is closed`));
    const next = this.queue.then(() => this.runOnce(script, what));
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Frees the context once the scripts given to it have run. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    void this.queue.then(() => this.lib.ctxFree(this.ctx));
  }

  private runOnce(script: string, what: string): Promise<void> {
    const l = this.lib;
    return new Promise((resolve, reject) => {
      l.run.async(this.ctx, script, (err: unknown, rc: number) => {
        if (err) return reject(new Error(`nft could not write ${what}: ${String(err)}`));
        // Read even on success: the buffer is cleared only by reading it.
        const message = String(l.getError(this.ctx) ?? '').trim();
        if (rc !== 0) return reject(new Error(`nft could not write ${what}: ${message || `error ${rc}`}`));
        resolve();
      });
    });
  }
}

let nodeContext: NftContext | undefined;

/** Runs an nft script in kni's own netns as one transaction; `what` names it in errors. Calls run one after another. */
export function nftRun(script: string, what: string): Promise<void> {
  nodeContext ??= new NftContext();
  return nodeContext.run(script, what);
}
