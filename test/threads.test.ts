// The daemon's worker threads and process exit: a process that exits while a thread loads
// koffi can abort (plugin/sys/threads.ts); waiting for threadsLoaded first never does.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { packageRoot } from '../plugin/server/protos';

const dist = path.join(packageRoot(), 'dist/plugin');

/** A process that starts the netns pool's thread and exits after ms, waiting for it to load first. */
function startThenExit(ms: number): Promise<{ code: number | null; signal: string | null; err: string }> {
  const script = `
    const { startThread, threadsLoaded } = require(${JSON.stringify(`${dist}/sys/threads.js`)});
    startThread(${JSON.stringify(`${dist}/netns/netns-pool-worker.js`)});
    setTimeout(() => void threadsLoaded().then(() => process.exit(0)), ${ms});
  `;
  return new Promise((resolve) => {
    const p = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr!.on('data', (b) => (err += b));
    p.on('exit', (code, signal) => resolve({ code, signal, err }));
  });
}

describe('worker threads', () => {
  it('a process exiting while a thread loads koffi exits cleanly once it waits for threadsLoaded (30 exits 25–45 ms after the start, where waiting for nothing aborted about one in 28)', async () => {
    for (let i = 0; i < 30; i++) {
      const r = await startThenExit(25 + (i % 21));
      assert.equal(r.code, 0, `exit ${i}: code ${r.code}, signal ${r.signal}\n${r.err.slice(0, 400)}`);
    }
  });
});
