// knictl against a running daemon, and without one.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { packageRoot } from '../plugin/server/protos';
import { TestDaemon } from './helpers/test-daemon';

const knictl = (...args: string[]) =>
  spawnSync(process.execPath, [path.join(packageRoot(), 'dist/plugin/knictl.js'), ...args], { encoding: 'utf8' });

describe('knictl', () => {
  let d: TestDaemon;
  before(async () => {
    d = await TestDaemon.start();
    const { netns_path } = await d.kni().CreateNetwork({ name: 'cli', namespace: 'ns1' });
    await d.rt().Attach({ sandbox_id: 'cli-sandbox', netns_path, pod: { name: 'cli', namespace: 'ns1' } });
  });
  after(() => d?.cleanup());

  it('pods, pod, node, ipam in table and JSON form', () => {
    const pods = knictl('--socket', d.socket, 'pods', '-o', 'json');
    assert.equal(pods.status, 0, pods.stderr);
    const list = JSON.parse(pods.stdout);
    assert.equal(list.length, 1);
    assert.equal(list[0].sandbox_id, 'cli-sandbox');
    const ip = list[0].interfaces[0].addresses[0].address;

    const table = knictl('--socket', d.socket, 'pods');
    assert.match(table.stdout, /^SANDBOX\s+POD\s+IPS\s+NETNS/);
    assert.match(table.stdout, new RegExp(`cli-sandbox\\s+ns1/cli\\s+${ip.replace(/\./g, '\\.')}`));

    const pod = JSON.parse(knictl('--socket', d.socket, 'pod', 'cli-sandbox', '-o', 'json').stdout);
    assert.equal(pod.interfaces[0].addresses[0].address, ip);
    assert.match(knictl('--socket', d.socket, 'pod', 'cli-sandbox').stdout, /0\.0\.0\.0\/0 via 10\.244\.0\.1 dev eth0/);

    const node = JSON.parse(knictl('--socket', d.socket, 'node', '-o', 'json').stdout);
    assert.equal(node.ready, true);
    assert.match(knictl('--socket', d.socket, 'node').stdout, /kni\s+true\s+kni0\s+1500/);

    const ipam = JSON.parse(knictl('--socket', d.socket, 'ipam', '-o', 'json').stdout);
    assert.equal(ipam.ranges[0].used, '1');
    assert.match(knictl('--socket', d.socket, 'ipam').stdout, /10\.244\.0\.0\/24\s+IPV4\s+253\s+1\s+252\s+false/);
    assert.equal(knictl('--socket', d.socket, 'check', 'cli-sandbox').stdout, 'ok\n');
  });

  it('says precisely what is wrong', () => {
    const missing = knictl('--socket', d.socket, 'pod', 'nope');
    assert.equal(missing.status, 1);
    assert.match(missing.stderr, /NOT_FOUND: sandbox nope is not attached/);
    const bad = knictl('--socket', d.socket, 'pod', 'a/b');
    assert.match(bad.stderr, /INVALID_ARGUMENT/);
    const down = knictl('--socket', `${d.dir}/no-daemon.sock`, 'pods');
    assert.equal(down.status, 1);
    assert.match(down.stderr, /kni-runtime is not running: no socket at/);
    const fmt = knictl('--socket', d.socket, 'pods', '-o', 'yaml');
    assert.notEqual(fmt.status, 0);
    assert.match(fmt.stderr, /Allowed choices are table, json/);
  });
});
