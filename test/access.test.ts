// Who may talk to kni, and what kni may do: root-only sockets, no shell anywhere, netns paths
// outside the allowed roots refused before any kernel call.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { packageRoot } from '../plugin/server/protos';
import { rejectsWith } from './helpers/expect';
import { RUN, sh, trySh } from './helpers/sh';
import { KNICTL } from './helpers/knictl';
import { TestDaemon } from './helpers/test-daemon';

const NOBODY = 65534;

describe('access', () => {
  let d: TestDaemon;
  before(async () => {
    d = await TestDaemon.start({ ranges: ['10.64.0.0/24'] });
    fs.chmodSync(d.dir, 0o755); // let the unprivileged client reach the sockets themselves
  });
  after(() => d?.cleanup());

  it('the API and CNI sockets are 0600 root, and a non-root client is refused', () => {
    for (const s of [d.socket, d.cniSocket]) {
      const st = fs.statSync(s);
      assert.equal(st.mode & 0o777, 0o600, s);
      assert.equal(st.uid, 0, s);
    }
    const knictl = spawnSync(process.execPath, [KNICTL, '--socket', d.socket, 'pods'], { uid: NOBODY, gid: NOBODY, encoding: 'utf8' });
    assert.equal(knictl.status, 1);
    assert.match(knictl.stderr, /permission denied on .*kni\.sock: the kni socket is root-only \(0600\)/);
    const shim = spawnSync(path.join(packageRoot(), 'dist/bin/kni-cni'), [], {
      uid: NOBODY, gid: NOBODY, encoding: 'utf8',
      input: JSON.stringify({ cniVersion: '1.0.0', name: 'kni', socket: d.cniSocket }),
      env: { CNI_COMMAND: 'STATUS' },
    });
    assert.equal(shim.status, 1);
    assert.match(JSON.parse(shim.stdout).details ?? JSON.parse(shim.stdout).msg, /Permission denied|cannot reach/i);
  });

  it('a netns path outside the allowed roots is refused before any kernel call, even when it is a real netns', async () => {
    const name = `${RUN}-outside`;
    sh('ip', ['netns', 'add', name]);
    const outside = `/tmp/${RUN}-outside-netns`;
    fs.writeFileSync(outside, '');
    try {
      sh('mount', ['--bind', `/run/netns/${name}`, outside]);
      await rejectsWith(d.rt().Attach({ sandbox_id: 'outside', netns_path: outside }), grpc.status.INVALID_ARGUMENT, /outside the allowed netns roots/);
      const link = fs.symlinkSync(outside, path.join(d.netnsDir, 'sneaky')); // a symlink from inside a root to outside
      void link;
      await rejectsWith(d.rt().Attach({ sandbox_id: 'sneaky', netns_path: path.join(d.netnsDir, 'sneaky') }), grpc.status.INVALID_ARGUMENT, /outside the allowed netns roots/);
      assert.equal(sh('ip', ['-n', name, '-o', 'link']).trim().split('\n').length, 1, 'something was created in the netns');
      assert.equal(Number((await d.rt().GetIPAMStatus({})).ranges[0].used), 0);
    } finally {
      fs.rmSync(path.join(d.netnsDir, 'sneaky'), { force: true });
      trySh('umount', [outside]);
      fs.rmSync(outside, { force: true });
      trySh('ip', ['netns', 'del', name]);
    }
  });

  it('nothing in kni runs a shell: the only child processes are the iptables commands and CNI plugins, without a shell', () => {
    const files: string[] = [];
    const walk = (dir: string) => {
      for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
        const f = path.join(dir, e.name);
        if (e.isDirectory()) walk(f);
        else if (/\.(ts|c)$/.test(e.name)) files.push(f);
      }
    };
    walk(path.join(packageRoot(), 'plugin'));
    walk(path.join(packageRoot(), 'runtime-hooks'));
    const spawning = files.filter((f) => /child_process|\b(execl|execlp|execle|execv|execvp|execve|system|popen|fork)\s*\(/.test(fs.readFileSync(f, 'utf8')));
    // iptables (node setup, host ports), nft (kni's own tables at node setup and reconcile; read when a trace asks) and CNI plugins (CNI networks only, never the built-in one).
    assert.deepEqual(spawning.map((f) => path.relative(packageRoot(), f)).sort(), ['plugin/cni/plugin-exec.ts', 'plugin/node/iptables.ts']);
    for (const f of spawning) {
      const src = fs.readFileSync(f, 'utf8');
      assert.doesNotMatch(src, /shell\s*:\s*true|\bexecSync\b|\bexec\(|\/bin\/sh/, f);
      assert.match(src, /\bexecFile\b/, f);
    }
  });
});
