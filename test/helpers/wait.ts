// Waiting on the kernel or a process: poll for the condition with a generous deadline (tests
// must pass on a busy machine) and fail with what was seen.
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number, seen: () => string, everyMs = 50): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms: ${seen()}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
