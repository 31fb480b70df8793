// knictl run as an operator runs it (its exit status and output), as the tests call it.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';

export const KNICTL = path.join(packageRoot(), 'dist/plugin/knictl.js');

export const knictl = (...args: string[]) => spawnSync(process.execPath, [KNICTL, ...args], { encoding: 'utf8' });
