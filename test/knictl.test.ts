// knictl against a running daemon, and without one.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { watchEvents } from '../plugin/client/clients';
import { printable } from '../plugin/client/terminal-text';
import { packageRoot } from '../plugin/server/protos';
import { sh } from './helpers/sh';
import { KNICTL, knictl } from './helpers/knictl';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';


describe('knictl', () => {
  let d: TestDaemon;
  before(async () => {
    // The veth the checks below delete stays deleted until knictl reconcile: not repaired on the kernel's notice.
    d = await TestDaemon.start({ repairOnNotice: false });
    const { netns_path } = await d.kni().CreateNetwork({ name: 'cli', namespace: 'ns1' });
    await d.rt().Attach({ sandbox_id: 'cli-sandbox', netns_path, pod: { name: 'cli', namespace: 'ns1' } });
  });
  after(() => d?.cleanup());

  it("what a pod or runtime named reaches the terminal escaped (bidi overrides, control characters); JSON stays exact", async () => {
    // A CRI client may name a pod anything but control characters: a right-to-left override
    // would make "evil\u202egnp.exe" show as "evilexe.png".
    const name = 'evil\u202egnp.exe';
    const { netns_path } = await d.kni().CreateNetwork({});
    try {
      await d.rt().Attach({ sandbox_id: 'cli-bidi', netns_path, pod: { name, namespace: 'ns1' } });
      const table = knictl('--socket', d.socket, 'pods');
      assert.ok(!table.stdout.includes('\u202e'), 'the override reached the terminal');
      assert.match(table.stdout, /ns1\/evil\\u202egnp\.exe/);
      const json = JSON.parse(knictl('--socket', d.socket, 'pods', '-o', 'json').stdout);
      assert.equal(json.find((p: any) => p.sandbox_id === 'cli-bidi').pod.name, name);
      await d.rt().Detach({ sandbox_id: 'cli-bidi' });
    } finally {
      await d.kni().DeleteNetwork({ netns_path });
    }
    assert.equal(printable('a\x1b[8mb\tc\nd\u2066'), 'a\\x1b[8mb\\x09c\nd\\u2066');
  });

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
    assert.match(knictl('--socket', d.socket, 'node').stdout, /kni\s+true\s+kni0\s+routed\s+1500/);

    const ipam = JSON.parse(knictl('--socket', d.socket, 'ipam', '-o', 'json').stdout);
    assert.equal(ipam.ranges[0].used, '1');
    assert.match(knictl('--socket', d.socket, 'ipam').stdout, /10\.244\.0\.0\/24\s+IPV4\s+253\s+1\s+252\s+false/);
    assert.equal(knictl('--socket', d.socket, 'check', 'cli-sandbox').stdout, 'ok\n');

    // Which kni: knictl's own version, and the daemon's through the Version RPC.
    const commit = JSON.parse(fs.readFileSync(path.join(packageRoot(), 'dist/build-info.json'), 'utf8')).commit;
    assert.equal(knictl('--version').stdout, `knictl 0.1.0 (commit ${commit})\n`);
    const v = JSON.parse(knictl('--socket', d.socket, 'version', '-o', 'json').stdout);
    assert.deepEqual({ ...v.server, started_at: undefined }, { version: '0.1.0', commit, api_version: 'kni.runtime.v1', started_at: undefined });
    assert.ok(Date.parse(v.server.started_at) <= Date.now());
    assert.match(knictl('--socket', d.socket, 'version').stdout, new RegExp(`^knictl:      0\\.1\\.0 \\(commit ${commit}\\)\nkni-runtime: 0\\.1\\.0 \\(commit ${commit}\\), API kni\\.runtime\\.v1, started `));
    assert.match(d.output, new RegExp(`"msg":"serving","version":"0\\.1\\.0","commit":"${commit}"`));
  });

  it('says precisely what is wrong', () => {
    const missing = knictl('--socket', d.socket, 'pod', 'nope');
    assert.equal(missing.status, 1);
    assert.match(missing.stderr, /^knictl: no sandbox matches "nope" \(a sandbox id or a unique prefix of one, or its pod as namespace\/name \(or name alone\)\)$/m);
    const gone = knictl('--socket', d.socket, 'pod', 'f'.repeat(64));
    assert.match(gone.stderr, /NOT_FOUND: sandbox f{64} is not attached/);
    assert.match(knictl('--socket', d.socket, 'check', 'ns9/none').stderr, /no sandbox matches "ns9\/none"/);
    const down = knictl('--socket', `${d.dir}/no-daemon.sock`, 'pods');
    assert.equal(down.status, 1);
    assert.match(down.stderr, /kni-runtime is not running: no socket at/);
    assert.match(knictl('--socket', '/etc/hostname', 'pods').stderr, /^knictl: \/etc\/hostname is not a socket: pass kni-runtime's --socket path$/m);
    const fmt = knictl('--socket', d.socket, 'pods', '-o', 'yaml');
    assert.notEqual(fmt.status, 0);
    assert.match(fmt.stderr, /Allowed choices are table, json/);
  });

  it('a sandbox named as knictl pods shows it (the first 13 of a CRI id), by a unique prefix, or by its pod; an ambiguous name is refused with the candidates', async () => {
    const ids = ['3f2a9c' + '0'.repeat(58), '3f2a9d' + '1'.repeat(58)];
    const seen: any[] = [];
    const w = watchEvents(d.socket, {}, (e) => seen.push(e), () => undefined);
    await w.opened;
    for (const [i, id] of ids.entries()) {
      const { netns_path } = await d.kni().CreateNetwork({ name: `web-${i}`, namespace: i ? 'shop' : 'cart' });
      await d.rt().Attach({ sandbox_id: id, netns_path, pod: { name: i ? 'web' : 'web', namespace: i ? 'shop' : 'cart' } });
    }
    try {
      await waitFor(() => seen.length >= 2, 10_000, () => `events seen: ${seen.length}`);
      const shown = knictl('--socket', d.socket, 'pods').stdout;
      assert.match(shown, /^3f2a9c0000000\s+cart\/web\s/m);
      const sandboxOf = (...args: string[]) => {
        const r = knictl('--socket', d.socket, 'pod', ...args, '-o', 'json');
        assert.equal(r.status, 0, r.stderr);
        return JSON.parse(r.stdout).sandbox_id;
      };
      assert.equal(sandboxOf('3f2a9c0000000'), ids[0]);
      assert.equal(sandboxOf('3f2a9d'), ids[1]);
      assert.equal(sandboxOf('shop/web'), ids[1]);
      assert.equal(sandboxOf('cli'), 'cli-sandbox');
      assert.equal(knictl('--socket', d.socket, 'check', 'cart/web').stdout, 'ok\n');
      const many = knictl('--socket', d.socket, 'pod', 'web');
      assert.equal(many.status, 1);
      assert.match(many.stderr, /"web" matches 2 sandboxes; name one by its id:\n  3f2a9c0{58} \(pod cart\/web, created [^)]+\)\n  3f2a9d1{58} \(pod shop\/web/);
      assert.match(knictl('--socket', d.socket, 'detach-network', '3f2a', 'net1').stderr, /"3f2a" matches 2 sandboxes/);
      assert.equal(knictl('--socket', d.socket, 'detach-network', '3f2a9d', 'net1').stdout, 'sandbox 3f2a9d1111111 has no interface net1\n');
      // From the token of the first attach on: only shop/web's events.
      const events = knictl('--socket', d.socket, 'events', '--since', seen[0].resume_token, '--sandbox', 'shop/web');
      assert.equal(events.status, 0, events.stderr);
      assert.match(events.stdout, /attached\s+3f2a9d1111111  shop\/web/);
      assert.doesNotMatch(events.stdout, /cart\/web/);
    } finally {
      w.close();
      for (const id of ids) await d.rt().Detach({ sandbox_id: id });
    }
  });

  it('check exits 2 on a mismatch, reconcile repairs it, and KNI_SOCKET chooses the daemon', () => {
    const host = JSON.parse(knictl('--socket', d.socket, 'pod', 'cli-sandbox', '-o', 'json').stdout).interfaces[0].host_interface;
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'del', host]);
    const env = { ...process.env, KNI_SOCKET: d.socket };
    const check = spawnSync(process.execPath, [KNICTL, 'check', 'cli-sandbox'], { encoding: 'utf8', env });
    assert.equal(check.status, 2, check.stderr);
    assert.match(check.stdout, new RegExp(`problem: host veth ${host} is missing`));
    // Without a sandbox: the node and every sandbox, changing nothing.
    const all = knictl('--socket', d.socket, 'check');
    assert.equal(all.status, 2, all.stderr);
    assert.match(all.stdout, new RegExp(`^node: ready\\nsandboxes: 1 checked, 1 with problems\\nproblem: cli-sandbox \\(ns1/cli\\): host veth ${host} is missing`));
    assert.deepEqual(JSON.parse(knictl('--socket', d.socket, 'check', '-o', 'json').stdout).sandboxes.map((x: any) => x.sandbox_id), ['cli-sandbox']);
    const rec = spawnSync(process.execPath, [KNICTL, 'reconcile', '-o', 'json'], { encoding: 'utf8', env });
    assert.equal(rec.status, 0, rec.stderr);
    assert.deepEqual(JSON.parse(rec.stdout).repaired_sandbox_ids, ['cli-sandbox']);
    assert.equal(knictl('--socket', d.socket, 'reconcile').stdout, 'kernel and records agree\n');
    assert.equal(knictl('--socket', d.socket, 'check', 'cli-sandbox').status, 0);
    assert.equal(knictl('--socket', d.socket, 'check').stdout, 'node: ready\nsandboxes: 1 checked, 0 with problems\n');
  });

  it('a host veth set down (its routes gone with it, and not back when it comes up) is a problem; reconcile wires it again', () => {
    const host = () => JSON.parse(knictl('--socket', d.socket, 'pod', 'cli-sandbox', '-o', 'json').stdout).interfaces[0].host_interface as string;
    const before = host();
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', before, 'down']);
    const down = knictl('--socket', d.socket, 'check', 'cli-sandbox');
    assert.equal(down.status, 2, down.stderr);
    assert.match(down.stdout, new RegExp(`problem: host veth ${before} is down`));
    // Up again: IPv4 dropped the pod's route with the link and nothing puts it back.
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', before, 'up']);
    const up = knictl('--socket', d.socket, 'check', 'cli-sandbox');
    assert.equal(up.status, 2, up.stderr);
    assert.match(up.stdout, new RegExp(`problem: no route to \\S+ through host veth ${before}`));
    assert.deepEqual(JSON.parse(knictl('--socket', d.socket, 'reconcile', '-o', 'json').stdout).repaired_sandbox_ids, ['cli-sandbox']);
    assert.equal(knictl('--socket', d.socket, 'check', 'cli-sandbox').status, 0);
    assert.match(sh('ip', ['-n', d.nodeNetnsName, 'link', 'show', 'dev', host()]), /state UP|LOWER_UP/);
  });
});

describe('kni-runtime flags and environment', () => {
  const main = path.join(packageRoot(), 'dist/plugin/main.js');

  it('--print-config prints the effective config, refusing a bad one with every problem', () => {
    const dir = fs.mkdtempSync('/tmp/kni-printcfg-');
    try {
      fs.writeFileSync(`${dir}/ok.yaml`, 'bridge: kni9\nranges: [10.99.0.0/24]\nreconcileSeconds: 5\n');
      const ok = spawnSync(process.execPath, [main, '--config', `${dir}/ok.yaml`, '--print-config'], { encoding: 'utf8' });
      assert.equal(ok.status, 0, ok.stderr);
      const cfg = JSON.parse(ok.stdout);
      assert.deepEqual([cfg.bridge, cfg.ranges, cfg.reconcileSeconds, cfg.mtu], ['kni9', ['10.99.0.0/24'], 5, 'auto']);
      fs.writeFileSync(`${dir}/bad.yaml`, 'mtu: 10\nreconcileSeconds: 0\nbogus: 1\n');
      const bad = spawnSync(process.execPath, [main, '--config', `${dir}/bad.yaml`, '--print-config'], { encoding: 'utf8' });
      assert.equal(bad.status, 1);
      for (const re of [/mtu/, /reconcileSeconds must be a whole number of seconds, at least 1/, /unknown setting "bogus"/]) assert.match(bad.stderr, re);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('KNI_LOG_LEVEL and KNI_METRICS_ADDR configure a daemon without flags', async () => {
    const port = 20000 + (process.pid % 20000);
    const d2 = await TestDaemon.start({}, { env: { KNI_LOG_LEVEL: 'debug', KNI_METRICS_ADDR: `127.0.0.1:${port}` } });
    try {
      await d2.rt().GetNode({});
      await waitFor(() => /"level":"debug","msg":"rpc"/.test(d2.output), 10_000, () => 'no debug line');
      const m = spawnSync('nsenter', [`--net=${d2.nodeNetns}`, 'curl', '-s', `http://127.0.0.1:${port}/metrics`], { encoding: 'utf8' });
      assert.match(m.stdout, /kni_pods_attached 0/);
    } finally {
      d2.cleanup();
    }
    const d3 = await TestDaemon.start({}, { env: { KNI_LOG_LEVEL: 'warn' } });
    try {
      await d3.rt().Attach({ sandbox_id: 'quiet', netns_path: d3.makePodNetns('quiet') });
      assert.doesNotMatch(d3.output, /"level":"(info|debug)"/);
    } finally {
      d3.cleanup();
    }
  });
});
