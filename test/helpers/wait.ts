// Waiting on the kernel or a process: poll for the condition with a generous deadline (tests
// must pass on a busy machine) and fail with what was seen. A condition that throws (kubectl or
// knictl while the API server or kni restarts) has not been met yet; the last error is part of
// the failure if the deadline passes.
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number, seen: () => string, everyMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      if (await cond()) return;
      lastError = undefined;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() > deadline) {
      let what: string;
      try {
        what = seen();
      } catch (e) {
        what = `(and saying what was seen failed: ${(e as Error)?.message ?? e})`;
      }
      const last = lastError === undefined ? '' : `; the condition last threw: ${(lastError as Error)?.message ?? lastError}`;
      throw new Error(`condition not met within ${timeoutMs} ms: ${what}${last}`);
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
