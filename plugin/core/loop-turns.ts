// Long passes over every peer (thousands at 5,000 Nodes) let the event loop turn now and then,
// so that an Attach, a CNI call or an NRI hook waiting behind one is answered in its normal time.

/**
 * A clock for one pass: each call returns undefined until `ms` have passed since the pass began
 * or last yielded, then a promise that resolves after a turn of the event loop (await it there).
 */
export function loopTurns(ms: number): () => Promise<void> | undefined {
  let until = performance.now() + ms;
  return () => {
    if (performance.now() <= until) return undefined;
    return new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
      until = performance.now() + ms;
    });
  };
}
