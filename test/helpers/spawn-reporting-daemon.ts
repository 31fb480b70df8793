// kni-runtime with every child_process entry point reporting itself: each call prints one
// {"msg":"TEST spawn",...} line before it runs, so a test sees at run time whether anything
// was spawned while it attached and detached pods.
import childProcess from 'node:child_process';

const cp = childProcess as unknown as Record<string, (...args: unknown[]) => unknown>;
for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork']) {
  const original = cp[name];
  cp[name] = function (this: unknown, ...args: unknown[]) {
    process.stdout.write(`${JSON.stringify({ msg: 'TEST spawn', fn: name, command: String(args[0]) })}\n`);
    return original.apply(this, args);
  };
}

require('../../plugin/main');
