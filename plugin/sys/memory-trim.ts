// The C heap's free memory given back to the kernel now and then. glibc keeps what is freed in
// its arenas (one per thread that allocates, unless MALLOC_ARENA_MAX caps them: kni's image and
// DaemonSet set two) and gives back only the top of each, above a threshold that grows with the
// largest blocks freed: after a burst of work the memory stays with kni. Measured with
// bench:scale (kni as the node agent among 5,000 Nodes, docs/node-agent.md): one malloc_trim took
// kni from 263 to 215 MB RSS, a gain far beyond the benchmark's spread between runs (under 10 MB).
import { stepSeconds } from '../observe/metrics';
import { mallocTrim } from './libc';

/** malloc_trim every intervalMs (unref'd: it never keeps the process up); the stop function. */
export function startMemoryTrim(intervalMs = 30_000): () => void {
  const timer = setInterval(() => {
    const started = performance.now();
    mallocTrim();
    stepSeconds.of('memory.trim').observe((performance.now() - started) / 1000);
  }, intervalMs).unref();
  return () => clearInterval(timer);
}
