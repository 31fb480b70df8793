// The daemon's V8 setting (plugin/sys/v8-flags.ts): functions compiled after it get baseline
// code at their first call, and the daemon sets it once it serves, not before.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../plugin/server/protos';
import { BASELINE_FLAG } from '../plugin/sys/v8-flags';
import { RUN } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

const dist = path.join(packageRoot(), 'dist/plugin');
/** V8's OptimizationStatus bit for "has baseline (Sparkplug) code". */
const BASELINE_BIT = 1 << 15;

describe('V8 settings of the daemon', () => {
  it('after compileBaselineFromNowOn, a function has baseline code from its first call; one compiled before does not', () => {
    // %GetOptimizationStatus needs --allow-natives-syntax, which only this child process gets.
    const script = `
      const { compileBaselineFromNowOn } = require(${JSON.stringify(`${dist}/sys/v8-flags.js`)});
      function before(x) { return x + 1; }
      before(1);
      compileBaselineFromNowOn();
      function after(x) { return x + 2; }
      after(1);
      process.stdout.write(JSON.stringify([%GetOptimizationStatus(before), %GetOptimizationStatus(after)]));
    `;
    const r = spawnSync(process.execPath, ['--allow-natives-syntax', '-e', script], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const [before, after] = JSON.parse(r.stdout) as number[];
    assert.equal(before & BASELINE_BIT, 0, `status ${before.toString(2)}`);
    assert.equal(after & BASELINE_BIT, BASELINE_BIT, `status ${after.toString(2)}`);
  });

  it('the daemon sets it once, after it serves (set before its modules load, it made the daemon slower to start)', async () => {
    const wrapper = `/tmp/${RUN}-v8-wrapper.js`;
    // Records each V8 flag the daemon sets, as a line of its output, then runs the daemon.
    fs.writeFileSync(wrapper, `
      const v8 = require('node:v8');
      const set = v8.setFlagsFromString.bind(v8);
      v8.setFlagsFromString = (f) => { process.stdout.write('v8 flag set: ' + f + '\\n'); set(f); };
      require(${JSON.stringify(`${dist}/main.js`)});
    `);
    let d: TestDaemon | undefined;
    try {
      d = await TestDaemon.start({}, { script: wrapper });
      const out = d.output;
      const set = out.indexOf(`v8 flag set: ${BASELINE_FLAG}`);
      assert.ok(set > 0, out.slice(0, 2000));
      assert.ok(out.indexOf('"msg":"serving"') < set, 'set before the daemon served');
      assert.equal(out.split('v8 flag set:').length, 2, 'set once');
    } finally {
      d?.cleanup();
      fs.rmSync(wrapper, { force: true });
    }
  });
});
