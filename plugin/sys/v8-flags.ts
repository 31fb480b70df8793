// V8 settings of the daemon.
//
// Baseline (Sparkplug) code for every function from its first call. By default V8 interprets a
// function until it has run enough to earn baseline code, and optimises it hundreds of calls
// later (`--minimum-invocations-after-ic-update=500`): the attach path, which runs once per pod,
// is still being optimised after 400 attaches, so the first pods a daemon wires after a start,
// and every pod of a node that starts a few an hour, run on code V8 has not compiled yet.
// Set once the daemon serves, not at its start: set before its modules load it made the daemon
// ≈ 80 ms slower to start serving (all of its start-up code compiled) and 3 MB larger, for the
// same attaches. Measured in docs/performance-rounds.md, eighth round.
import v8 from 'node:v8';

export const BASELINE_FLAG = '--always-sparkplug';

/** From now on, functions compiled for the first time get baseline code at once. */
export function compileBaselineFromNowOn(): void {
  v8.setFlagsFromString(BASELINE_FLAG);
}
