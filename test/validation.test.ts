// Bad input gets a precise gRPC error and the daemon keeps serving with its state intact.
import * as grpc from '@grpc/grpc-js';
import assert from 'node:assert/strict';
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client, runtimeClient } from '../plugin/client/clients';
import { packageRoot } from '../plugin/server/protos';
import { rejectsWith } from './helpers/expect';
import { RUN, sh, trySh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

const S = grpc.status;

describe('validation', () => {
  let d: TestDaemon;
  let rt: Client;
  let kni: Client;
  let good: string;

  before(async () => {
    d = await TestDaemon.start();
    rt = d.rt();
    kni = d.kni();
    good = (await kni.CreateNetwork({ name: 'ok', namespace: 'default' })).netns_path;
    await rt.Attach({ sandbox_id: 'keeper', netns_path: good });
  });
  after(() => d?.cleanup());

  const attach = (req: object) => rt.Attach({ sandbox_id: 'v1', netns_path: good, ...req });

  it('sandbox ids: empty, oversized, with / or ..', async () => {
    await rejectsWith(attach({ sandbox_id: '' }), S.INVALID_ARGUMENT, /sandbox id is empty/);
    await rejectsWith(attach({ sandbox_id: 'x'.repeat(129) }), S.INVALID_ARGUMENT, /129 characters long \(at most 128\)/);
    await rejectsWith(attach({ sandbox_id: 'a/b' }), S.INVALID_ARGUMENT, /"a\/b" has characters/);
    await rejectsWith(attach({ sandbox_id: '..' }), S.INVALID_ARGUMENT, /"\.\." has characters/);
    await rejectsWith(rt.GetPod({ sandbox_id: '../../etc' }), S.INVALID_ARGUMENT, /has characters/);
    await rejectsWith(rt.Detach({ sandbox_id: '' }), S.INVALID_ARGUMENT, /empty/);
    await rejectsWith(kni.QueryPodNetwork({ id: 'x'.repeat(500) }), S.INVALID_ARGUMENT, /at most 128/);
  });

  it('netns paths: relative, traversal, outside the roots, symlinks out, missing, not a netns', async () => {
    await rejectsWith(attach({ netns_path: '' }), S.INVALID_ARGUMENT, /netns path is empty/);
    await rejectsWith(attach({ netns_path: 'run/netns/x' }), S.INVALID_ARGUMENT, /not absolute/);
    await rejectsWith(attach({ netns_path: `${d.netnsDir}/../../etc/passwd` }), S.INVALID_ARGUMENT, /not normalised/);
    await rejectsWith(attach({ netns_path: '/etc/hostname' }), S.INVALID_ARGUMENT, /outside the allowed netns roots/);
    const link = `${d.netnsDir}/${RUN}-evil`;
    fs.symlinkSync('/etc/hostname', link);
    await rejectsWith(attach({ netns_path: link }), S.INVALID_ARGUMENT, /outside the allowed netns roots/);
    await rejectsWith(attach({ netns_path: `${d.netnsDir}/nope` }), S.NOT_FOUND, /does not exist/);
    const plain = `${d.netnsDir}/${RUN}-plain`;
    fs.writeFileSync(plain, '');
    await rejectsWith(attach({ netns_path: plain }), S.INVALID_ARGUMENT, /is not a network namespace/);
    await rejectsWith(attach({ netns_path: '/proc/999999999/ns/net' }), S.NOT_FOUND, /no such process/);
    await rejectsWith(kni.AttachInterface({ id: 'v2' }), S.INVALID_ARGUMENT, /set isolation\.path or extradata\["netns"\]/);
    await rejectsWith(kni.CreateNetwork({ netns_path_prefix: '/etc' }), S.INVALID_ARGUMENT, /not kni's netns dir/);
    // A refused netns leaves nothing behind: no address taken.
    assert.equal((await rt.GetIPAMStatus()).ranges[0].used, '1');
  });

  it('29 hostile netns path forms, each refused with a precise code before anything is wired', async () => {
    const root = d.netnsDir;
    const made: string[] = [];
    const mk = (name: string, make: (p: string) => void) => {
      const p = `${root}/${RUN}-${name}`;
      make(p);
      made.push(p);
      return p;
    };
    const fifo = mk('fifo', (p) => spawnSync('mkfifo', [p]));
    const dir = mk('dir', (p) => fs.mkdirSync(p));
    const plain = mk('plainf', (p) => fs.writeFileSync(p, 'x'));
    const toEtc = mk('to-etc', (p) => fs.symlinkSync('/etc/hostname', p));
    const toSelf = mk('to-self', (p) => fs.symlinkSync(`/proc/${d.proc!.pid}/ns/net`, p));
    const loop = mk('loop', (p) => fs.symlinkSync(p, p));
    const dangling = mk('dangling', (p) => fs.symlinkSync(`${root}/nothing-here`, p));
    const dirOut = mk('dir-out', (p) => fs.symlinkSync('/etc', p));
    const mntNs = mk('mntns', (p) => {
      fs.writeFileSync(p, '');
      spawnSync('mount', ['--bind', `/proc/${process.pid}/ns/mnt`, p]);
    });
    const sock = mk('sock', (p) => spawnSync('python3', ['-c', `import socket; socket.socket(socket.AF_UNIX).bind('${p}')`]));
    const daemonTid = fs.readdirSync(`/proc/${d.proc!.pid}/task`)[0];
    const cases: [string, grpc.status, RegExp][] = [
      ['', S.INVALID_ARGUMENT, /netns path is empty/],
      ['run/netns/x', S.INVALID_ARGUMENT, /not absolute/],
      ['./x', S.INVALID_ARGUMENT, /not absolute/],
      [`${root}/../../etc/passwd`, S.INVALID_ARGUMENT, /not normalised/],
      [`${root}//x`, S.INVALID_ARGUMENT, /not normalised/],
      [`${root}/./x`, S.INVALID_ARGUMENT, /not normalised/],
      [`${root}/x/`, S.INVALID_ARGUMENT, /not normalised/],
      [`${root}/a\0b`, S.INVALID_ARGUMENT, /not a valid path/],
      [`/${'a'.repeat(4100)}`, S.INVALID_ARGUMENT, /not a valid path/],
      ['/etc/hostname', S.INVALID_ARGUMENT, /outside the allowed netns roots/],
      ['/etc', S.INVALID_ARGUMENT, /outside the allowed netns roots/],
      ['/dev/null', S.INVALID_ARGUMENT, /outside the allowed netns roots/],
      ['/dev/zero', S.INVALID_ARGUMENT, /outside the allowed netns roots/],
      [root, S.INVALID_ARGUMENT, /outside the allowed netns roots/],
      [fifo, S.INVALID_ARGUMENT, /is not a network namespace/],
      [dir, S.INVALID_ARGUMENT, /is not a network namespace/],
      [plain, S.INVALID_ARGUMENT, /is not a network namespace/],
      [sock, S.INVALID_ARGUMENT, /is not a network namespace/],
      [mntNs, S.INVALID_ARGUMENT, /is not a network namespace/],
      [toEtc, S.INVALID_ARGUMENT, /outside the allowed netns roots/],
      [toSelf, S.INVALID_ARGUMENT, /outside the allowed netns roots|node's own/],
      [loop, S.INVALID_ARGUMENT, /cannot be opened: ELOOP/],
      [dangling, S.NOT_FOUND, /does not exist/],
      [`${dirOut}/hostname`, S.INVALID_ARGUMENT, /outside the allowed netns roots/],
      [`${root}/nope`, S.NOT_FOUND, /does not exist/],
      ['/proc/999999999/ns/net', S.NOT_FOUND, /no such process/],
      [`/proc/${d.proc!.pid}/ns/net`, S.INVALID_ARGUMENT, /node's own network namespace/],
      [`/proc/${d.proc!.pid}/task/${daemonTid}/ns/net`, S.INVALID_ARGUMENT, /node's own network namespace/],
      [`/proc/${d.proc!.pid}/ns/mnt`, S.INVALID_ARGUMENT, /outside the allowed netns roots/],
    ];
    try {
      for (const [p, code, re] of cases) {
        await rejectsWith(attach({ sandbox_id: 'hostile', netns_path: p }), code, re).catch((e) => {
          throw new Error(`path ${JSON.stringify(p.slice(0, 80))}: ${(e as Error).message}`);
        });
      }
    } finally {
      spawnSync('umount', [mntNs]);
      for (const p of made) fs.rmSync(p, { recursive: true, force: true });
    }
    assert.equal(cases.length, 29);
    assert.equal((await rt.GetIPAMStatus()).ranges[0].used, '1', 'a refused path took an address');
    assert.equal(d.kniVeths().length, 1);
  });

  it('interface names and pod metadata', async () => {
    await rejectsWith(attach({ interface_name: 'a-very-long-name0' }), S.INVALID_ARGUMENT, /at most 15/);
    await rejectsWith(attach({ interface_name: 'eth/0' }), S.INVALID_ARGUMENT, /not a valid interface name/);
    // CRI puts no format on pod names (crictl and critest use capitals): only what would harm.
    await rejectsWith(attach({ pod: { name: 'web\u001b[8mx' } }), S.INVALID_ARGUMENT, /pod name "web\\u001b\[8mx" has a control character or '\/'/);
    await rejectsWith(attach({ pod: { namespace: 'a/b' } }), S.INVALID_ARGUMENT, /pod namespace "a\/b" has a control character or '\/'/);
    await rejectsWith(attach({ pod: { name: 'x'.repeat(254) } }), S.INVALID_ARGUMENT, /pod name is 254 bytes long \(at most 253\)/);
    const cri = await kni.CreateNetwork({});
    try {
      const r = await rt.Attach({ sandbox_id: 'cri-named', netns_path: cri.netns_path, pod: { name: 'Web_Server 1', namespace: 'CriTest', uid: 'ABC-1' } });
      assert.equal(r.interfaces.length, 1);
      assert.deepEqual((await rt.GetPod({ sandbox_id: 'cri-named' })).pod, { name: 'Web_Server 1', namespace: 'CriTest', uid: 'abc-1' });
      await rt.Detach({ sandbox_id: 'cri-named' });
    } finally {
      await kni.DeleteNetwork({ netns_path: cri.netns_path });
    }
    await rejectsWith(attach({ annotations: { big: 'x'.repeat(300 * 1024) } }), S.INVALID_ARGUMENT, /annotations is larger than/);
  });

  it('conflicts: same id in another netns, a second sandbox in a netns that already has eth0', async () => {
    const other = (await kni.CreateNetwork({})).netns_path;
    try {
      await rejectsWith(rt.Attach({ sandbox_id: 'keeper', netns_path: other }), S.ALREADY_EXISTS, /already attached in netns/);
      await rejectsWith(rt.Attach({ sandbox_id: 'intruder', netns_path: good }), S.ALREADY_EXISTS, /already has an interface named eth0/);
      assert.equal((await rt.Check({ sandbox_id: 'keeper' })).ok, true, 'the failed attach damaged the first sandbox');
    } finally {
      await kni.DeleteNetwork({ netns_path: other });
    }
  });

  it('unknown sandboxes: NOT_FOUND on queries', async () => {
    await rejectsWith(rt.GetPod({ sandbox_id: 'ghost' }), S.NOT_FOUND, /sandbox ghost is not attached/);
    await rejectsWith(kni.QueryPodNetwork({ id: 'ghost' }), S.NOT_FOUND, /not attached/);
    await rejectsWith(rt.Check({ sandbox_id: 'ghost' }), S.NOT_FOUND, /not attached/);
    await rejectsWith(kni.DeleteNetwork({}), S.INVALID_ARGUMENT, /neither a sandbox id nor a netns path/);
    await rejectsWith(rt.GarbageCollect({ live_sandbox_ids: ['ok', 'bad/id'] }), S.INVALID_ARGUMENT, /live sandbox id/);
  });

  it('keeps serving with state intact after all of that', async () => {
    const pods = (await rt.ListPods()).pods;
    assert.deepEqual(pods.map((p: any) => p.sandbox_id), ['keeper']);
    assert.equal((await rt.Check({ sandbox_id: 'keeper' })).ok, true);
    assert.equal((await rt.GetNode()).ready, true);
  });

  it('refuses to start on a bad config, naming every problem', () => {
    const file = `${d.dir}/bad.yaml`;
    fs.writeFileSync(file, 'ranges: ["10.0.0.0/33", "fd00::/64"]\nmtu: 10\nbridge: "a/b"\nbridgeMulticastSnooping: "no"\n');
    const r = spawnSync('nsenter', [`--net=${d.nodeNetns}`, process.execPath, path.join(packageRoot(), 'dist/plugin/main.js'), '--config', file, '--socket', `${d.dir}/x.sock`, '--state-dir', `${d.dir}/x`], { encoding: 'utf8' });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /prefix length 33 is too long/);
    assert.match(r.stderr, /mtu 10/);
    assert.match(r.stderr, /bridge "a\/b"/);
    assert.match(r.stderr, /bridgeMulticastSnooping must be true or false/);
    assert.ok(!fs.existsSync(`${d.dir}/x.sock`));
  });

  it('refuses at once a state dir or socket dir it cannot make (under /proc, below a dangling symlink), naming it', () => {
    fs.symlinkSync(`${d.dir}/nowhere`, `${d.dir}/dangling`);
    // Its own CNI socket: the running daemon's would stop this one first, as a second daemon.
    fs.writeFileSync(`${d.dir}/z.json`, JSON.stringify({ cni: { socket: `${d.dir}/z-cni.sock` } }));
    for (const [flag, at, re] of [
      ['--state-dir', '/proc/kni-state', /ENOENT: no such file or directory, mkdir '\/proc\/kni-state'/],
      ['--state-dir', `${d.dir}/dangling/state`, /dangling is a symlink whose target is missing/],
      ['--socket', `${d.dir}/dangling/kni.sock`, /dangling is a symlink whose target is missing/],
    ] as const) {
      const args = flag === '--socket' ? ['--socket', at, '--state-dir', `${d.dir}/z`] : ['--socket', `${d.dir}/z.sock`, '--state-dir', at];
      // Node's own recursive mkdir never returns on these paths: the timeout is the test.
      const r = spawnSync('nsenter', [`--net=${d.nodeNetns}`, process.execPath, path.join(packageRoot(), 'dist/plugin/main.js'), '--config', `${d.dir}/z.json`, ...args], { encoding: 'utf8', timeout: 30_000 });
      assert.equal(r.status, 1, `${flag} ${at}: ${r.signal ?? ''} ${r.stderr}`);
      assert.match(r.stderr, re);
    }
  });

  it('refuses a relative or overlong --socket and a relative --state-dir, before anything starts', () => {
    for (const [args, re] of [
      [['--socket', 'kni.sock'], /^kni-runtime: --socket "kni\.sock" must be an absolute path$/m],
      [['--socket', `/run/${'s'.repeat(110)}.sock`], /^kni-runtime: --socket is 120 bytes long; a unix socket path holds at most 107$/m],
      [['--state-dir', 'state'], /^kni-runtime: --state-dir "state" must be an absolute path$/m],
    ] as const) {
      const r = spawnSync('nsenter', [`--net=${d.nodeNetns}`, process.execPath, path.join(packageRoot(), 'dist/plugin/main.js'), '--config', d.configFile, '--socket', `${d.dir}/w.sock`, '--state-dir', `${d.dir}/w`, ...args], { encoding: 'utf8', timeout: 30_000 });
      assert.equal(r.status, 1, r.stderr);
      assert.match(r.stderr, re);
      assert.doesNotMatch(r.stderr, /\n\s+at /, 'a stack trace for a typo');
    }
  });

  it('refuses a kubeconfig that does not parse, naming the file', () => {
    fs.writeFileSync(`${d.dir}/kc`, 'clusters: [\n');
    fs.writeFileSync(`${d.dir}/kc.json`, JSON.stringify({ kubernetes: { nodeName: 'n1', kubeconfig: `${d.dir}/kc` }, cni: { socket: `${d.dir}/kc-cni.sock` } }));
    const r = spawnSync('nsenter', [`--net=${d.nodeNetns}`, process.execPath, path.join(packageRoot(), 'dist/plugin/main.js'), '--config', `${d.dir}/kc.json`, '--socket', `${d.dir}/kc.sock`, '--state-dir', `${d.dir}/kc-state`], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`^kni-runtime: kubernetes\\.nodeName is n1 but kubeconfig ${d.dir}/kc cannot be read: `, 'm'));
  });

  it('a dual-stack config on a node with IPv6 turned off: not ready, saying what to change', async () => {
    const ns = `${RUN}-noipv6`;
    const dir = fs.mkdtempSync(`/tmp/${RUN}-noipv6-`);
    sh('ip', ['netns', 'add', ns]);
    let daemon: ChildProcess | undefined;
    let client: Client | undefined;
    try {
      sh('ip', ['netns', 'exec', ns, 'sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1', 'net.ipv6.conf.default.disable_ipv6=1']);
      fs.writeFileSync(`${dir}/c.json`, JSON.stringify({ ranges: ['10.77.0.0/24', 'fd00:77::/64'], netnsDir: `${dir}/pods`, cni: { socket: `${dir}/cni.sock` } }));
      daemon = spawn('nsenter', [`--net=/run/netns/${ns}`, process.execPath, path.join(packageRoot(), 'dist/plugin/main.js'), '--config', `${dir}/c.json`, '--socket', `${dir}/kni.sock`, '--state-dir', `${dir}/state`], { stdio: 'ignore' });
      await waitFor(() => fs.existsSync(`${dir}/kni.sock`), 20_000, () => 'the daemon never served');
      client = runtimeClient(`${dir}/kni.sock`);
      const node = await client.GetNode();
      assert.equal(node.ready, false);
      assert.match(node.networks[0].reason, /add address fd00:77::1\/64 to kni0: EACCES.*; this node has IPv6 turned off \(net\.ipv6\.conf\.\*\.disable_ipv6\): list only an IPv4 range in ranges, or turn IPv6 on$/);
    } finally {
      client?.close();
      daemon?.kill('SIGKILL');
      if (daemon) await new Promise((r) => daemon!.once('exit', r));
      trySh('umount', [`${dir}/pods`]);
      trySh('ip', ['netns', 'del', ns]);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a second daemon on a live socket', () => {
    const r = spawnSync('nsenter', [`--net=${d.nodeNetns}`, process.execPath, path.join(packageRoot(), 'dist/plugin/main.js'), '--config', d.configFile, '--socket', d.socket, '--state-dir', `${d.dir}/y`], { encoding: 'utf8' });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /another process is serving/);
    assert.ok(!fs.existsSync(`${d.dir}/y`), 'the second daemon touched state before finding the socket taken');
  });
});
