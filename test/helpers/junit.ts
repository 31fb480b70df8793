// A Ginkgo suite's JUnit report (critest, the Kubernetes e2e suite): each spec's verdict and failure.
import fs from 'node:fs';

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
