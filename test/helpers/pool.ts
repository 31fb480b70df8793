/** Runs fn(0..n-1) with at most `width` in flight; rejects on the first failure. */
export async function inParallel<T>(width: number, n: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(width, n) }, async () => {
    for (let i = next++; i < n; i = next++) out[i] = await fn(i);
  }));
  return out;
}
