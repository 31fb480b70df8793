// Ginkgo suites (critest, the Kubernetes e2e suite): running one, and its JUnit report's specs.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export type Verdict = 'passed' | 'failed' | 'skipped';
export interface Spec {
  verdict: Verdict;
  failure: string;
}

/** The report's specs by name: verdict and failure text (suite-level nodes left out). */
export function readJunit(file: string): Map<string, Spec> {
  const xml = fs.readFileSync(file, 'utf8');
  const out = new Map<string, Spec>();
  const unescape = (s: string) => s.replace(/&#xA;/g, '\n').replace(/&(quot|#34);/g, '"').replace(/&#39;/g, "'").replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');
  for (const m of xml.matchAll(/<testcase name="([^"]*)"[^>]*?(?:\/>|>([\s\S]*?)<\/testcase>)/g)) {
    const name = unescape(m[1]);
    if (/^\[(Synchronized|Report)?(Before|After)Suite\]/.test(name)) continue;
    const body = m[2] ?? '';
    const verdict: Verdict = /<(failure|error)[\s>]/.test(body) ? 'failed' : /<skipped[\s>/]/.test(body) ? 'skipped' : 'passed';
    out.set(name, { verdict, failure: unescape(/<(?:failure|error)[^>]*message="([^"]*)"/.exec(body)?.[1] ?? '') });
  }
  return out;
}

/**
 * Runs a Ginkgo suite binary (critest, e2e.test) that writes a JUnit report into dir, its output
 * to dir/suite.log as it goes (a spec that hangs shows where), killed after killAfterMs; the
 * report's specs, or a failure with the log's tail when it wrote none. Awaited, not spawnSync:
 * the daemons a test starts log into pipes of this process, and a blocked event loop stops
 * draining them, which soon blocks their every call on a log write.
 */
export async function runGinkgoSuite(cmd: string, args: string[], dir: string, killAfterMs: number): Promise<Map<string, Spec>> {
  fs.mkdirSync(dir, { recursive: true });
  const logFile = `${dir}/suite.log`;
  const log = fs.openSync(logFile, 'w');
  const proc = spawn(cmd, args, { cwd: dir, stdio: ['ignore', log, log] });
  const killer = setTimeout(() => proc.kill('SIGKILL'), killAfterMs);
  const ended = await new Promise<string>((resolve) => {
    proc.once('error', (e) => resolve(e.message));
    proc.once('exit', (status) => resolve(`exit ${status}`));
  });
  clearTimeout(killer);
  fs.closeSync(log);
  const junit = fs.readdirSync(dir).find((f) => f.endsWith('.xml'));
  if (!junit) throw new Error(`${path.basename(cmd)} wrote no report (${ended}):\n${fs.readFileSync(logFile, 'utf8').slice(-4000)}`);
  return readJunit(`${dir}/${junit}`);
}
