// What kni is: its package version and the commit it was built from (hack/setup.sh records the
// commit in dist/build-info.json, which the image carries). Shown by `kni-runtime --version`,
// `knictl version`, the Version RPC, the start log line and kni_build_info.
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from './server/protos';

export interface BuildInfo {
  version: string;
  commit: string;
}

function read(): BuildInfo {
  const root = packageRoot();
  let version = 'unknown';
  let commit = 'unknown';
  try {
    version = String(JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).version ?? version);
  } catch {
    // a bare dist/ without package.json: still runs
  }
  try {
    commit = String(JSON.parse(fs.readFileSync(path.join(root, 'dist/build-info.json'), 'utf8')).commit ?? commit);
  } catch {
    // built by tsc alone: the commit is not known
  }
  return { version, commit };
}

export const BUILD: BuildInfo = read();

/** "0.1.0 (commit 1a2b3c4d5e6f)". */
export const versionText = (b: BuildInfo = BUILD): string => `${b.version} (commit ${b.commit})`;
