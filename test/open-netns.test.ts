// Opening a netns path someone handed kni (plugin/netns/open-netns.ts): what each refusal says,
// what an accepted path gives, on the real kernel, and that nothing is left open either way.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KniError } from '../plugin/core/errors';
import { socketInNetns } from '../plugin/netns/netns';
import { openNetns } from '../plugin/netns/open-netns';
import { RUN, sh, trySh } from './helpers/sh';

describe('opening a netns path', () => {
  const pin = `${RUN}-on`;
  let dir = '';
  const openFds = () => fs.readdirSync('/proc/self/fd').length;
  const refused = (p: string, roots: string[] | 'any', code: string, why: RegExp) =>
    assert.throws(() => openNetns(p, { allowedRoots: roots }), (e: KniError) => e instanceof KniError && e.code === code && why.test(e.message));

  before(() => {
    sh('ip', ['netns', 'add', pin]);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), `${RUN}-on-`));
    // Once first: the library loads and the node's netns is opened (kept for the process).
    openNetns(`/run/netns/${pin}`, { allowedRoots: 'any' }).close();
  });
  after(() => {
    trySh('ip', ['netns', 'del', pin]);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a pod netns: an fd setns accepts, its inode, reached through a symlinked root too', () => {
    const before = openFds();
    const h = openNetns(`/run/netns/${pin}`, { allowedRoots: ['/run/netns'] });
    try {
      assert.equal(h.inode, fs.statSync(`/run/netns/${pin}`).ino);
      assert.equal(fs.fstatSync(h.fd).ino, h.inode);
      socketInNetns(h.fd).close(); // setns into it, and back
      assert.equal(h.path, `/run/netns/${pin}`);
    } finally {
      h.close();
      h.close(); // a second close closes nothing else
    }
    fs.symlinkSync('/run/netns', path.join(dir, 'roots'));
    const via = openNetns(path.join(dir, 'roots', pin), { allowedRoots: [path.join(dir, 'roots')] });
    assert.equal(via.inode, fs.statSync(`/run/netns/${pin}`).ino);
    via.close();
    assert.equal(openFds(), before);
  });

  it('each refusal names its reason, and leaves no descriptor open', () => {
    const before = openFds();
    const file = path.join(dir, 'plain');
    fs.writeFileSync(file, 'x');
    refused(path.join(dir, 'missing'), 'any', 'NOT_FOUND', /does not exist$/);
    refused('/proc/999999999/ns/net', 'any', 'NOT_FOUND', /does not exist \(no such process\)/);
    refused(file, 'any', 'INVALID_ARGUMENT', /is not a network namespace/);
    refused(file, ['/run/netns'], 'INVALID_ARGUMENT', /is outside the allowed netns roots \(\/run\/netns\)/);
    refused(`/run/netns/${pin}`, [dir], 'INVALID_ARGUMENT', /is outside the allowed netns roots/);
    refused(`/proc/${process.pid}/ns/uts`, 'any', 'INVALID_ARGUMENT', /is not a network namespace/);
    refused(`/proc/${process.pid}/ns/net`, ['/run/netns'], 'INVALID_ARGUMENT', /is the node's own network namespace/);
    refused(`${dir}/a\0b`, 'any', 'INVALID_ARGUMENT', /is not a valid path/);
    fs.mkdirSync(path.join(dir, 'sub'));
    refused(path.join(dir, 'sub'), 'any', 'INVALID_ARGUMENT', /is not a network namespace/);
    refused(`${dir}/${'x'.repeat(300)}`, 'any', 'INVALID_ARGUMENT', /cannot be opened: ENAMETOOLONG/);
    assert.equal(openFds(), before);
  });
});
