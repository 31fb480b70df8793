// kni's CNI runner (plugin/cni/) with Debian's reference plugins, inside a node netns: a chained
// conflist (bridge + host-local + portmap + tuning), results in 0.4.0, 1.0.0 and 1.1.0, DEL
// from a new process (a kni restart) with the cached result, a failing plugin mid-chain leaving
// nothing, CHECK catching drift, GC of attachments not in the valid list, and config errors.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { CniConfigError, parseNetworkConfig } from '../plugin/cni/conflist';
import { CniPluginError, execPlugin, supportedVersionsSync, versionAnswer } from '../plugin/cni/plugin-exec';
import { packageRoot } from '../plugin/server/protos';
import { inNetns, RUN, sh, trySh } from './helpers/sh';
import { installTestPlugin } from './helpers/test-plugins';

const BIN = ['/usr/lib/cni'];

describe('CNI runner with the reference plugins (real kernel)', () => {
  const node = `${RUN}-cninode`;
  const dir = `/tmp/${RUN}-cni`;
  const pods: string[] = [];
  const cli = path.join(packageRoot(), 'dist/test/helpers/cni-runner-cli.js');

  const conflist = (version: string, plugins: unknown[]) => JSON.stringify({ cniVersion: version, name: 'chain', plugins });
  const bridge = (subnet = '10.77.0.0/24') => ({ type: 'bridge', bridge: 'cni-k0', isGateway: true, ipMasq: false, ipam: { type: 'host-local', dataDir: `${dir}/ipam`, ranges: [[{ subnet }]], routes: [{ dst: '0.0.0.0/0' }] } });
  const portmap = { type: 'portmap', capabilities: { portMappings: true }, snat: true };
  const tuning = (sysctl: Record<string, string> = { 'net.ipv4.conf.eth0.arp_notify': '1' }) => ({ type: 'tuning', sysctl });

  function run(op: string, list: string, extra: Record<string, unknown> = {}): any {
    const out = execFileSync('nsenter', [`--net=/run/netns/${node}`, process.execPath, cli, JSON.stringify({ op, conflist: list, binDirs: BIN, cacheDir: `${dir}/cache`, ...extra })], { encoding: 'utf8' });
    return JSON.parse(out);
  }
  function pod(name: string): { rt: Record<string, unknown>; netns: string } {
    const full = `${RUN}-${name}`;
    sh('ip', ['netns', 'add', full]);
    pods.push(full);
    return { netns: `/run/netns/${full}`, rt: { containerId: name, netns: `/run/netns/${full}`, ifName: 'eth0', args: `IgnoreUnknown=1;K8S_POD_NAME=${name}`, capabilityArgs: { portMappings: [{ hostPort: 8088, containerPort: 80, protocol: 'tcp' }] } } };
  }
  const ipamFiles = () => (fs.existsSync(`${dir}/ipam/chain`) ? fs.readdirSync(`${dir}/ipam/chain`).filter((f) => /^\d/.test(f)) : []);
  const nodeVeths = () => sh('ip', ['-n', node, '-o', 'link', 'show', 'type', 'veth']).trim();
  const dnat = () => inNetns(`/run/netns/${node}`, 'iptables', ['-t', 'nat', '-S']).out.split('\n').filter((l) => l.includes('8088'));

  before(() => {
    sh('ip', ['netns', 'add', node]);
    sh('ip', ['-n', node, 'link', 'set', 'lo', 'up']);
    fs.mkdirSync(dir, { recursive: true });
  });
  after(() => {
    for (const p of pods) trySh('ip', ['netns', 'del', p]);
    trySh('ip', ['netns', 'del', node]);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('ADD runs the chain in order with prevResult (bridge + host-local + portmap + tuning); DEL from a new process uses the cached result and leaves nothing', () => {
    const list = conflist('1.0.0', [bridge(), portmap, tuning()]);
    const a = pod('a');
    const r = run('add', list, { rt: a.rt });
    assert.ok(r.ok, JSON.stringify(r));
    assert.equal(r.result.cniVersion, '1.0.0');
    assert.match(r.result.ips[0].address, /^10\.77\.0\.\d+\/24$/);
    assert.equal(r.result.ips[0].version, undefined);
    assert.match(inNetns(a.netns, 'ip', ['-o', 'addr', 'show', 'eth0']).out, new RegExp(r.result.ips[0].address.replace(/\./g, '\\.')));
    assert.equal(inNetns(a.netns, 'cat', ['/proc/sys/net/ipv4/conf/eth0/arp_notify']).out.trim(), '1', 'tuning (last in the chain) did not run');
    assert.ok(dnat().length > 0, 'portmap got no portMappings from the capability');
    assert.ok(fs.readdirSync(`${dir}/cache`).length === 1);
    // Each call is a new process: DEL knows the result only from the cache on disk.
    const d = run('del', list, { rt: { containerId: 'a', netns: a.netns, ifName: 'eth0' } });
    assert.ok(d.ok, JSON.stringify(d));
    assert.deepEqual(ipamFiles(), []);
    assert.equal(nodeVeths(), '');
    assert.deepEqual(dnat(), [], 'portmap DEL did not get the cached mappings');
    assert.deepEqual(fs.readdirSync(`${dir}/cache`), []);
    assert.ok(run('del', list, { rt: { containerId: 'a', netns: a.netns, ifName: 'eth0' } }).ok, 'DEL twice must succeed');
  });

  it('results come in the version the config asks: 0.4.0 with ips[].version, 1.0.0 without; a 1.0.0 result converts to 1.1.0', () => {
    const b = pod('b');
    const r4 = run('add', conflist('0.4.0', [bridge()]), { rt: b.rt });
    assert.ok(r4.ok, JSON.stringify(r4));
    assert.equal(r4.result.cniVersion, '0.4.0');
    assert.equal(r4.result.ips[0].version, '4');
    assert.ok(run('del', conflist('0.4.0', [bridge()]), { rt: b.rt }).ok);
    const c = run('convert', '', { result: { cniVersion: '1.0.0', ips: [{ address: 'fd00::5/64' }] }, to: '1.1.0' });
    assert.deepEqual(c.result, { cniVersion: '1.1.0', ips: [{ address: 'fd00::5/64' }] });
    assert.deepEqual(run('convert', '', { result: c.result, to: '0.4.0' }).result.ips, [{ version: '6', address: 'fd00::5/64' }]);
  });

  it('a config without cniVersion runs as libcni (and Multus) run it: the plugins answer 0.2.0 (ip4, ip6), which converts both ways', () => {
    const u = pod('u');
    const list = JSON.stringify({ name: 'chain', type: 'bridge', bridge: 'cni-k0', isGateway: true, ipam: { type: 'host-local', dataDir: `${dir}/ipam`, ranges: [[{ subnet: '10.77.0.0/24' }], [{ subnet: 'fd00:77::/64' }]], routes: [{ dst: '0.0.0.0/0' }] } });
    const r = run('add', list, { rt: u.rt });
    assert.ok(r.ok, JSON.stringify(r));
    assert.equal(r.result.cniVersion, '0.1.0');
    assert.match(r.result.ip4.ip, /^10\.77\.0\.\d+\/24$/);
    assert.match(r.result.ip6.ip, /^fd00:77::[0-9a-f]+\/64$/);
    assert.match(inNetns(u.netns, 'ip', ['-o', 'addr', 'show', 'eth0']).out, new RegExp(r.result.ip4.ip.replace(/\./g, '\\.')));
    const now = run('convert', '', { result: r.result, to: '1.1.0' }).result;
    assert.deepEqual(now.ips, [{ address: r.result.ip4.ip, gateway: '10.77.0.1' }, { address: r.result.ip6.ip, gateway: r.result.ip6.gateway }]);
    assert.deepEqual(now.routes, [{ dst: '0.0.0.0/0' }]);
    assert.deepEqual(run('convert', '', { result: now, to: '0.4.0' }).result.ips.map((i: any) => i.version), ['4', '6']);
    assert.deepEqual(run('convert', '', { result: now, to: '0.2.0' }).result, { ...r.result, cniVersion: '0.2.0' });
    assert.ok(run('del', list, { rt: { containerId: 'u', netns: u.netns, ifName: 'eth0' } }).ok);
    assert.deepEqual(ipamFiles(), []);
  });

  it('a plugin failing in the middle of the chain fails the ADD and leaves nothing behind (the earlier plugins\' DEL ran)', () => {
    const e = pod('e');
    const list = conflist('1.0.0', [bridge(), tuning({ 'net.ipv4.conf.eth0.no_such_knob': '1' }), portmap]);
    const r = run('add', list, { rt: e.rt });
    assert.equal(r.ok, false);
    assert.equal(r.error.plugin, 'tuning');
    assert.deepEqual(ipamFiles(), [], 'the address host-local gave is still taken');
    assert.equal(nodeVeths(), '', 'the veth the bridge plugin made is still there');
    assert.deepEqual(fs.readdirSync(`${dir}/cache`), []);
  });

  it('CHECK passes on a healthy attachment and fails once the pod interface lost its address', () => {
    const list = conflist('1.0.0', [bridge()]);
    const c = pod('c');
    assert.ok(run('add', list, { rt: c.rt }).ok);
    assert.ok(run('check', list, { rt: c.rt }).ok);
    sh('ip', ['-n', `${RUN}-c`, 'addr', 'flush', 'dev', 'eth0']);
    const r = run('check', list, { rt: c.rt });
    assert.equal(r.ok, false);
    assert.match(r.error.msg, /10\.77\.0\.\d+|address|not found/i);
    assert.ok(run('del', list, { rt: c.rt }).ok);
  });

  it('GC deletes every cached attachment not in the valid list, and keeps the valid one', () => {
    const list = conflist('1.0.0', [bridge()]);
    const keep = pod('keep');
    const drop = pod('drop');
    assert.ok(run('add', list, { rt: keep.rt }).ok);
    assert.ok(run('add', list, { rt: drop.rt }).ok);
    const r = run('gc', list, { valid: [{ containerId: 'keep', ifName: 'eth0' }] });
    assert.ok(r.ok, JSON.stringify(r));
    assert.deepEqual(r.result, ['drop']);
    assert.equal(ipamFiles().length, 1);
    assert.ok(run('check', list, { rt: keep.rt }).ok);
    assert.ok(run('del', list, { rt: keep.rt }).ok);
  });

  it('a device from the kubelet reaches every plugin as deviceID and pciBusID (and runtimeConfig where declared); DEL from a new process gives the device back', () => {
    const bin = `${dir}/bin`;
    installTestPlugin(bin, 'kni-test-device', 'device-cni');
    const dev = `${RUN.slice(0, 9)}vf0`;
    sh('ip', ['-n', node, 'link', 'add', dev, 'type', 'veth', 'peer', 'name', `${dev}p`]); // this kernel has no dummy links
    const mac = JSON.parse(sh('ip', ['-n', node, '-j', 'link', 'show', 'dev', dev]))[0].address;
    const logFile = `${dir}/device-cni.log`;
    const list = conflist('1.0.0', [{ type: 'kni-test-device', capabilities: { deviceID: true }, logFile }, { type: 'tuning', sysctl: {} }]);
    const d = pod('dev');
    const rt = { ...d.rt, ifName: 'net1', capabilityArgs: { deviceID: dev } };
    const r = run('add', list, { rt, binDirs: [bin, ...BIN] });
    assert.ok(r.ok, JSON.stringify(r));
    assert.equal(r.result.interfaces[0].mac, mac);
    assert.match(sh('ip', ['-n', d.netns.split('/').pop()!, 'link', 'show', 'net1']), new RegExp(mac));
    const add = JSON.parse(fs.readFileSync(logFile, 'utf8').trim().split('\n')[0]);
    assert.deepEqual([add.deviceID, add.pciBusID, add.runtimeConfig.deviceID], [dev, dev, dev]);
    // The DEL names no device: it comes from ADD's cache entry.
    assert.ok(run('del', list, { rt: { ...rt, capabilityArgs: undefined }, binDirs: [bin, ...BIN] }).ok);
    assert.match(sh('ip', ['-n', node, 'link', 'show', dev]), new RegExp(mac), 'the device is not back on the node under its own name');
    sh('ip', ['-n', node, 'link', 'del', dev]);
  });

  it('with chrootDir (the host\'s root, as Multus thick\'s), a plugin found under it runs chrooted there and sees its files; one found only in kni\'s own root runs there, in the same chain', () => {
    // A "host root" holding a static busybox and a plugin that exists only there.
    const root = `${dir}/hostroot`;
    const hostBin = `/opt/kni-hostonly-${RUN}`;
    fs.mkdirSync(`${root}/bin`, { recursive: true });
    fs.mkdirSync(`${root}${hostBin}`, { recursive: true });
    fs.copyFileSync('/bin/busybox', `${root}/bin/busybox`);
    fs.chmodSync(`${root}/bin/busybox`, 0o755);
    const script = ['#!/bin/busybox sh', '/bin/busybox mkdir -p /var/lib/cni', '/bin/busybox cat > /var/lib/cni/seen-$CNI_COMMAND', '[ "$CNI_COMMAND" = ADD ] && echo \'{"cniVersion":"1.0.0","interfaces":[],"ips":[{"address":"10.79.0.5/24"}]}\'', 'exit 0'];
    // Installed as some distributions install plugins: a symlink whose absolute target is the host's.
    fs.mkdirSync(`${root}/usr/libexec/cni`, { recursive: true });
    fs.writeFileSync(`${root}/usr/libexec/cni/kni-test-hostonly`, `${script.join('\n')}\n`, { mode: 0o755 });
    fs.symlinkSync('/usr/libexec/cni/kni-test-hostonly', `${root}${hostBin}/kni-test-hostonly`);
    const ownBin = `${dir}/own-bin`;
    installTestPlugin(ownBin, 'kni-test-record', 'record-cni');
    const log = `${dir}/chroot-record.log`;
    const list = conflist('1.0.0', [{ type: 'kni-test-hostonly' }, { type: 'kni-test-record', logFile: log }]);
    const h = pod('h');
    const where = { binDirs: [hostBin, ownBin], chrootDir: root };
    const r = run('add', list, { rt: h.rt, ...where });
    assert.ok(r.ok, JSON.stringify(r));
    assert.deepEqual(r.result.ips, [{ address: '10.79.0.5/24' }]);
    // The chrooted plugin wrote into the host root's /var/lib/cni; kni's root has no such file.
    assert.equal(JSON.parse(fs.readFileSync(`${root}/var/lib/cni/seen-ADD`, 'utf8')).name, 'chain');
    assert.ok(!fs.existsSync(`/var/lib/cni/seen-ADD`));
    // The plugin only in kni's root (a Node script: no Node in the host root) ran, with the chrooted one's result.
    assert.deepEqual(JSON.parse(fs.readFileSync(log, 'utf8').trim()).prevIps, ['10.79.0.5/24']);
    assert.ok(run('del', list, { rt: { containerId: 'h', netns: h.netns, ifName: 'eth0' }, ...where }).ok);
    assert.ok(fs.existsSync(`${root}/var/lib/cni/seen-DEL`));
    const missing = run('add', list, { rt: pod('h2').rt, binDirs: where.binDirs, chrootDir: `${dir}/no-such-root` });
    assert.match(missing.error.msg, /defaultNetwork\.chrootDir .*no-such-root is not a directory: mount the host's root there/);
  });

  it('a bad config is refused with every problem named; a missing plugin binary says where it looked', () => {
    assert.throws(() => parseNetworkConfig('{"cniVersion":"9.9.9","name":"bad name","plugins":[{"type":"../x"},{"capabilities":{"a":1}}]}', 'f.conflist'), (e: Error) =>
      e instanceof CniConfigError && /cniVersion "9\.9\.9"/.test(e.message) && /name "bad name"/.test(e.message) && /plugins\[0\]\.type "\.\.\/x"/.test(e.message) && /plugins\[1\]\.type/.test(e.message) && /plugins\[1\]\.capabilities/.test(e.message));
    assert.throws(() => parseNetworkConfig('{', 'f.conflist'), /not JSON/);
    const single = parseNetworkConfig('{"cniVersion":"0.4.0","name":"one","type":"bridge","bridge":"x"}', 'one.conf');
    assert.deepEqual(single.plugins, [{ type: 'bridge', bridge: 'x' }]);
    // As libcni: cniVersions (CNI 1.1) gives the highest version kni speaks, a later one left to a
    // newer runtime; disableCheck and disableGC may be written as strings.
    const listed = (extra: object) => parseNetworkConfig(JSON.stringify({ name: 'v', plugins: [{ type: 'bridge' }], ...extra }), 'v.conflist');
    assert.equal(listed({ cniVersions: ['0.4.0', '1.0.0', '1.1.0', '2.0.0'] }).cniVersion, '1.1.0');
    assert.equal(listed({ cniVersion: '1.0.0', cniVersions: ['0.4.0', '1.1.5'] }).cniVersion, '1.0.0');
    assert.deepEqual([listed({ cniVersion: '1.1.0', disableCheck: 'TRUE', disableGC: 'false' })].map((l) => [l.disableCheck, l.disableGC]), [[true, false]]);
    assert.throws(() => listed({ cniVersions: ['2.0.0'] }), /cniVersions \["2\.0\.0"\] and cniVersion name no version up to 1\.1\.0/);
    assert.throws(() => listed({ cniVersions: '1.0.0' }), /cniVersions must list versions/);
    assert.equal(listed({}).cniVersion, '0.1.0', 'no version at all: the plugins read 0.1.0, as libcni runs it');
    assert.throws(() => listed({ cniVersion: '1.1.0', disableGC: 'yes' }), /disableGC must be true or false/);
    const r = run('add', conflist('1.0.0', [{ type: 'nonexistent-plugin' }]), { rt: pod('m').rt });
    assert.equal(r.ok, false);
    assert.match(r.error.msg, /no executable nonexistent-plugin in \/usr\/lib\/cni/);
  });

  it('a plugin that exits without reading its config: its answer counts, and the broken pipe is nobody\'s crash', async () => {
    const bin = `${dir}/closer-bin`;
    fs.mkdirSync(bin, { recursive: true });
    // Closes its stdin first, so a write of more than a pipe holds meets EPIPE whatever the timing.
    fs.writeFileSync(`${bin}/closer`, '#!/bin/sh\nexec 0<&-\nsleep 0.1\nif [ "$CNI_COMMAND" = VERSION ]; then echo \'{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}\'; exit 0; fi\necho \'{"cniVersion":"1.0.0","code":11,"msg":"not today"}\'\nexit 1\n', { mode: 0o755 });
    const big = { cniVersion: '1.0.0', name: 'big', type: 'closer', padding: 'x'.repeat(256 << 10) };
    await assert.rejects(execPlugin({ binDirs: [bin] }, 'closer', { command: 'ADD', containerId: 'c', netns: '/proc/self/ns/net', ifName: 'eth0' }, big), (e: unknown) => e instanceof CniPluginError && e.code === 11 && e.msg === 'not today');
    assert.deepEqual(supportedVersionsSync([bin], 'closer'), { versions: ['0.4.0', '1.0.0'] });
    // Its input not written at all (the plugin gone first): the answer still counts; why a plugin
    // could not be asked is said.
    const epipe = Object.assign(new Error('spawnSync closer EPIPE'), { code: 'EPIPE' });
    assert.deepEqual(versionAnswer({ error: epipe, status: 0, signal: null, stdout: '{"supportedVersions":["1.0.0"]}' }), { versions: ['1.0.0'] });
    assert.deepEqual(versionAnswer({ error: Object.assign(new Error('spawnSync closer ETIMEDOUT'), { code: 'ETIMEDOUT' }), status: null, signal: 'SIGTERM', stdout: '' }), { why: 'no VERSION answer within 10 s' });
    assert.deepEqual(versionAnswer({ status: 2, signal: null, stdout: '' }), { why: 'VERSION exited 2' });
    assert.deepEqual(versionAnswer({ status: 0, signal: null, stdout: 'hello' }), { why: 'its VERSION answer is not JSON: "hello"' });
    assert.deepEqual(supportedVersionsSync([bin], 'missing'), { why: `no executable missing in ${bin}` });
  });
});
