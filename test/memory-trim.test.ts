// The C heap's free memory given back to the kernel (plugin/sys/memory-trim.ts): glibc's
// malloc_trim through koffi, timed as a step.
import assert from 'node:assert/strict';
import { registry } from '../plugin/observe/metrics';
import { mallocTrim } from '../plugin/sys/libc';
import { startMemoryTrim } from '../plugin/sys/memory-trim';
import { waitFor } from './helpers/wait';

describe('memory trim', () => {
  it('malloc_trim answers whether it gave memory back; the periodic trim is timed as the step memory.trim', async () => {
    assert.equal(typeof mallocTrim(), 'boolean');
    const stop = startMemoryTrim(20);
    try {
      await waitFor(async () => /kni_step_duration_seconds_count\{step="memory\.trim"\} [1-9]/.test(await registry.metrics()), 10_000, () => 'no memory.trim step timed');
    } finally {
      stop();
    }
  });
});
