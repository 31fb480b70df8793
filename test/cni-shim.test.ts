// The CNI 1.1 path: the kni-cni binary exec'd with env + stdin, through the daemon, on the kernel.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { packageRoot } from '../plugin/server/protos';
import { cni, cniAsync } from './helpers/cni-exec';
import { inNetns, ping, RUN } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

describe('CNI shim (kni-cni)', () => {
  let d: TestDaemon;
  let conf: Record<string, unknown>;
  const k8sArgs = (name: string, uid = 'u-1') => `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=x;K8S_POD_UID=${uid}`;
  const env = (id: string, netns: string, name = id) => ({ CNI_CONTAINERID: id, CNI_NETNS: netns, CNI_IFNAME: 'eth0', CNI_ARGS: k8sArgs(name) });

  before(async () => {
    d = await TestDaemon.start({ cni: { confDir: '', binDir: '' } });
    conf = { cniVersion: '1.0.0', name: 'kni', type: 'kni-cni', socket: d.cniSocket };
  });
  after(() => d?.cleanup());

  it('VERSION lists the spec versions it speaks, without needing the daemon', () => {
    const r = cni('VERSION', {}, { cniVersion: '1.0.0' });
    assert.equal(r.code, 0, r.raw);
    assert.deepEqual(r.out.supportedVersions, ['0.4.0', '1.0.0', '1.1.0']);
  });

  it('ADD answers a spec-conformant result, in the version asked; ADD again answers the same; DEL releases', async () => {
    const netns = d.makePodNetns('cni-a');
    const r = cni('ADD', env('cni-a', netns), conf);
    assert.equal(r.code, 0, r.raw);
    assert.equal(r.out.cniVersion, '1.0.0');
    const [host, pod] = r.out.interfaces;
    assert.match(host.name, /^kni[0-9a-f]{12}$/);
    assert.deepEqual(Object.keys(pod).sort(), ['mac', 'name', 'sandbox']);
    assert.equal(pod.name, 'eth0');
    assert.equal(pod.sandbox, netns);
    assert.equal(r.out.ips.length, 2);
    assert.match(r.out.ips[0].address, /^10\.244\.0\.\d+\/32$/, 'a routed pod (podLink auto on a new node) holds its address alone');
    assert.equal(r.out.ips[0].gateway, '10.244.0.1');
    assert.equal(r.out.ips[0].interface, 1);
    assert.match(r.out.ips[1].address, /^fd00:10:244::[0-9a-f]+\/128$/);
    assert.deepEqual(r.out.routes, [{ dst: '0.0.0.0/0', gw: '10.244.0.1' }, { dst: '::/0', gw: 'fd00:10:244::1' }]);
    assert.deepEqual(r.out.dns, {});
    const ip = r.out.ips[0].address.split('/')[0];
    assert.match(inNetns(netns, 'ip', ['-o', 'addr']).out, new RegExp(`inet ${ip.replace(/\./g, '\\.')}/32`));
    assert.deepEqual((await d.rt().GetPod({ sandbox_id: 'cni-a' })).pod, { name: 'cni-a', namespace: 'default', uid: 'u-1' });

    assert.deepEqual(cni('ADD', env('cni-a', netns), conf).out, r.out);
    assert.equal(cni('CHECK', env('cni-a', netns), conf).code, 0);
    const del = cni('DEL', env('cni-a', netns), conf);
    assert.equal(del.code, 0, del.raw);
    assert.equal(del.raw, '');
    assert.ok(!d.nodeLinks().includes(host.name));
    assert.equal(cni('DEL', env('cni-a', netns), conf).code, 0, 'DEL of a released sandbox must succeed');
    assert.equal(cni('DEL', env('never-added', ''), conf).code, 0, 'DEL of an unknown sandbox must succeed');
  });

  it('honours a requested static IP and MAC (ips and mac capabilities, CNI_ARGS IP=); refuses bad ones clearly, taking nothing', async () => {
    const netns = d.makePodNetns('cni-static');
    const asked = { ...conf, runtimeConfig: { ips: ['10.244.0.77/24', 'fd00:10:244::77/64'], mac: 'C2:11:22:33:44:55' } };
    const r = cni('ADD', env('cni-static', netns), asked);
    assert.equal(r.code, 0, r.raw);
    assert.deepEqual(r.out.ips.map((i: any) => i.address), ['10.244.0.77/32', 'fd00:10:244::77/128']);
    assert.equal(r.out.interfaces[1].mac, 'c2:11:22:33:44:55');
    const link = inNetns(netns, 'ip', ['-o', 'addr', 'show', 'eth0']).out + inNetns(netns, 'ip', ['-o', 'link', 'show', 'eth0']).out;
    assert.match(link, /inet 10\.244\.0\.77\/32/);
    assert.match(link, /inet6 fd00:10:244::77\/128/);
    assert.match(link, /link\/ether c2:11:22:33:44:55/);

    // CNI_ARGS IP= (one family given: the other is allocated).
    const netns2 = d.makePodNetns('cni-static2');
    const r2 = cni('ADD', { ...env('cni-static2', netns2), CNI_ARGS: `${k8sArgs('cni-static2')};IP=10.244.0.78` }, conf);
    assert.equal(r2.code, 0, r2.raw);
    assert.equal(r2.out.ips[0].address, '10.244.0.78/32');
    assert.match(r2.out.ips[1].address, /^fd00:10:244::/);

    const used = () => d.rt().GetIPAMStatus({}).then((s: any) => s.ranges.map((x: any) => x.used).join(','));
    const bad: [Record<string, unknown>, number, RegExp][] = [
      [{ ips: ['10.244.0.77'] }, 102, /requested address 10\.244\.0\.77 is in use by sandbox cni-static/],
      [{ ips: ['10.9.9.9/24'] }, 4, /requested address 10\.9\.9\.9 is outside pod range 10\.244\.0\.0\/24/],
      [{ ips: ['10.244.0.1'] }, 4, /is the gateway of pod range/],
      [{ ips: ['10.244.0.255'] }, 4, /is the broadcast address/],
      [{ ips: ['10.244.0.80', '10.244.0.81'] }, 4, /two IPv4 addresses requested/],
      [{ ips: ['not-an-ip'] }, 4, /requested IP "not-an-ip" is not an address/],
      [{ mac: '01:00:5e:00:00:01' }, 4, /multicast/],
      [{ mac: 'c2:11' }, 4, /six hex pairs/],
    ];
    const before = await used();
    for (const [i, [runtimeConfig, code, re]] of bad.entries()) {
      const nsX = d.makePodNetns(`cni-bad${i}`);
      const x = cni('ADD', env(`cni-bad${i}`, nsX), { ...conf, runtimeConfig });
      assert.equal(x.code, 1, `${JSON.stringify(runtimeConfig)}: ${x.raw}`);
      assert.equal(x.out.code, code, `${JSON.stringify(runtimeConfig)}: ${x.raw}`);
      assert.match(x.out.msg, re);
      assert.equal(await used(), before, `${JSON.stringify(runtimeConfig)} took an address`);
    }
    for (const id of ['cni-static', 'cni-static2']) assert.equal(cni('DEL', env(id, ''), conf).code, 0);
  });

  it('1.1.0 results carry the MTU, 0.4.0 results the IP version', () => {
    const n1 = d.makePodNetns('cni-v11');
    const r11 = cni('ADD', env('cni-v11', n1), { ...conf, cniVersion: '1.1.0' });
    assert.equal(r11.out.cniVersion, '1.1.0');
    assert.equal(r11.out.interfaces[1].mtu, 1500);
    const n0 = d.makePodNetns('cni-v04');
    const r04 = cni('ADD', env('cni-v04', n0), { ...conf, cniVersion: '0.4.0' });
    assert.deepEqual(r04.out.ips.map((i: any) => i.version), ['4', '6']);
    cni('DEL', env('cni-v11', n1), conf);
    cni('DEL', env('cni-v04', n0), conf);
  });

  it('a late DEL of a crashed sandbox leaves the new sandbox of the same pod alone (seed 004)', () => {
    const n1 = d.makePodNetns('trap-1');
    const n2 = d.makePodNetns('trap-2');
    const a1 = cni('ADD', env('trap-a1', n1, 'web'), conf);
    const a2 = cni('ADD', env('trap-a2', n2, 'web'), conf);
    assert.equal(a2.code, 0, a2.raw);
    assert.equal(cni('DEL', env('trap-a1', n1, 'web'), conf).code, 0);
    assert.equal(cni('CHECK', env('trap-a2', n2, 'web'), conf).code, 0);
    assert.ok(ping(n2, '10.244.0.1'));
    assert.notEqual(a1.out.ips[0].address, a2.out.ips[0].address);
    cni('DEL', env('trap-a2', n2, 'web'), conf);
  });

  it('CHECK fails with code 100 when the kernel drifted; STATUS is 0 when ready', () => {
    const n = d.makePodNetns('drift');
    const r = cni('ADD', env('cni-drift', n), conf);
    inNetns(d.nodeNetns, 'ip', ['link', 'del', r.out.interfaces[0].name]);
    const chk = cni('CHECK', env('cni-drift', n), conf);
    assert.equal(chk.code, 1);
    assert.equal(chk.out.code, 100);
    assert.match(chk.out.details, /host veth .* is missing/);
    assert.equal(cni('DEL', env('cni-drift', n), conf).code, 0);
    assert.equal(cni('STATUS', {}, { ...conf, cniVersion: '1.1.0' }).code, 0);
  });

  it('GC releases every CNI attachment not in cni.dev/valid-attachments, and leaves what other entry points attached', async () => {
    const keep = d.makePodNetns('gc-keep');
    const drop = d.makePodNetns('gc-drop');
    await d.rt().Attach({ sandbox_id: 'gc-api', netns_path: d.makePodNetns('gc-api') });
    cni('ADD', env('gc-keep', keep), conf);
    const dropped = cni('ADD', env('gc-drop', drop), conf);
    const r = cni('GC', {}, { ...conf, cniVersion: '1.1.0', 'cni.dev/valid-attachments': [{ containerID: 'gc-keep', ifname: 'eth0' }] });
    assert.equal(r.code, 0, r.raw);
    const ids = (await d.rt().ListPods()).pods.map((p: any) => p.sandbox_id);
    assert.deepEqual(ids.sort(), ['gc-api', 'gc-keep']);
    assert.ok(!d.nodeLinks().includes(dropped.out.interfaces[0].name));
    cni('DEL', env('gc-keep', keep), conf);
    await d.rt().Detach({ sandbox_id: 'gc-api' });
  });

  it('answers CNI errors with precise codes', () => {
    const n = d.makePodNetns('errs');
    const expectErr = (r: ReturnType<typeof cni>, code: number, re: RegExp) => {
      assert.equal(r.code, 1, r.raw);
      assert.equal(r.out.code, code, r.raw);
      assert.match(`${r.out.msg} ${r.out.details ?? ''}`, re);
    };
    expectErr(cni('ADD', { ...env('e1', n), KNI_CNI_SOCKET: d.cniSocket }, '{not json'), 6, /not valid JSON/);
    expectErr(cni('ADD', env('e1', n), { ...conf, cniVersion: '0.1.0' }), 1, /not supported/);
    expectErr(cni('BOGUS', env('e1', n), conf), 4, /CNI_COMMAND "BOGUS"/);
    expectErr(cni('', env('e1', n), conf), 4, /CNI_COMMAND ""/);
    expectErr(cni('ADD', env('../e1', n), conf), 4, /sandbox id/);
    expectErr(cni('ADD', env('e1', '/etc/hostname'), conf), 4, /outside the allowed netns roots/);
    expectErr(cni('ADD', { ...env('e1', n), CNI_IFNAME: 'a-very-long-ifname' }, conf), 4, /at most 15/);
    expectErr(cni('ADD', { ...env('e1', n), CNI_ARGS: 'garbage' }, conf), 4, /not KEY=VALUE/);
    const down = cni('STATUS', {}, { ...conf, socket: `${d.dir}/nobody.sock` });
    expectErr(down, 50, /not reachable/);
    expectErr(cni('ADD', env('e1', n), { ...conf, socket: `${d.dir}/nobody.sock` }), 11, /not reachable/);
  });

  it('a graceful restart of kni (SIGTERM): STATUS stays ready and an ADD made meanwhile waits for the new kni; a crash (kill -9) or an old restart is reported at once', async () => {
    const g = await TestDaemon.start({ bridge: 'knirst', ranges: ['10.96.0.0/24'], cni: { confDir: '', binDir: '' } });
    const c = { cniVersion: '1.1.0', name: 'kni', type: 'kni-cni', socket: g.cniSocket };
    const marker = `${g.cniSocket}.restarting`;
    const conflist = () => `${g.dir}/net.d/10-kni.conflist`;
    try {
      // With a conflist of its own (in the test's dir), as kni runs under a CNI-calling runtime.
      await g.stop('SIGKILL');
      const cfg = JSON.parse(fs.readFileSync(g.configFile, 'utf8'));
      fs.writeFileSync(g.configFile, JSON.stringify({ ...cfg, cni: { ...cfg.cni, confDir: `${g.dir}/net.d` } }));
      await g.launch();
      await waitFor(() => fs.existsSync(conflist()), 10_000, () => g.output.slice(-2000));
      await g.stop('SIGTERM');
      assert.ok(fs.existsSync(marker), 'no restart marker after SIGTERM');
      assert.equal(JSON.parse(fs.readFileSync(marker, 'utf8')).graceSeconds, 60);
      const status = cni('STATUS', {}, c);
      assert.equal(status.code, 0, status.raw);
      assert.equal(status.raw, '');
      const netns = g.makePodNetns('rst-a');
      const add = cniAsync('ADD', env('rst-a', netns), c);
      // Still waiting a second later (without the marker it failed at once), then answered by the new kni.
      const early = await Promise.race([add.then(() => 'answered'), new Promise((r) => setTimeout(() => r('waiting'), 1000))]);
      assert.equal(early, 'waiting');
      await g.launch();
      const r = await add;
      assert.equal(r.code, 0, r.raw);
      assert.match(r.out.ips[0].address, /^10\.96\.0\.\d+\/32$/);
      assert.ok(!fs.existsSync(marker), 'the new kni left the restart marker in place');
      // Its conflist removed first (the preStop found kni leaving the node): no kni is coming back.
      await waitFor(() => fs.existsSync(conflist()), 10_000, () => g.output.slice(-2000));
      fs.rmSync(conflist());
      await g.stop('SIGTERM');
      assert.ok(!fs.existsSync(marker), 'a restart marker though kni left the node');
      // kill -9 leaves no marker: the absence is reported at once.
      await g.launch();
      await g.stop('SIGKILL');
      assert.ok(!fs.existsSync(marker));
      assert.equal(cni('STATUS', {}, c).out.code, 50);
      // A restart older than the grace: kni did not come back.
      fs.writeFileSync(marker, '{}');
      const old = new Date(Date.now() - 61_000);
      fs.utimesSync(marker, old, old);
      assert.equal(cni('STATUS', {}, c).out.code, 50);
      assert.match(cni('ADD', env('rst-b', netns), c).out.msg, /kni-runtime is not reachable/);
    } finally {
      g.cleanup();
    }
  });

  it('a call in flight when kni stops gracefully is answered before it exits; one cut short is sent again to the next kni', async () => {
    // A default network whose plugin takes a second: the ADD is in flight when SIGTERM comes.
    const dir = `/tmp/${RUN}-drain`;
    fs.mkdirSync(`${dir}/bin`, { recursive: true });
    fs.writeFileSync(`${dir}/bin/kni-test-slow`, '#!/bin/sh\ncat > /dev/null\n[ "$CNI_COMMAND" = ADD ] || exit 0\nsleep 1\necho \'{"cniVersion":"1.0.0","interfaces":[],"ips":[{"address":"10.87.0.5/24"}]}\'\n', { mode: 0o755 });
    fs.writeFileSync(`${dir}/slow.conflist`, JSON.stringify({ cniVersion: '1.0.0', name: 'slow', plugins: [{ type: 'kni-test-slow' }] }));
    const g = await TestDaemon.start({ defaultNetwork: { cni: `${dir}/slow.conflist`, binDirs: [`${dir}/bin`] }, cni: { confDir: '', binDir: '' } });
    const c = { cniVersion: '1.0.0', name: 'kni', type: 'kni-cni', socket: g.cniSocket };
    try {
      const netns = g.makePodNetns('drain-a');
      const add = cniAsync('ADD', env('drain-a', netns), c);
      await waitFor(() => fs.existsSync(`${g.stateDir}/cni-results`) && fs.readdirSync(`${g.stateDir}/cni-results`).length > 0, 5_000, () => g.output.slice(-2000));
      const exited = g.stop('SIGTERM');
      const r = await add;
      assert.equal(r.code, 0, r.raw);
      assert.deepEqual(r.out.ips.map((i: any) => i.address), ['10.87.0.5/24']);
      assert.equal(await exited, 0);
      // Cut short: the stopping kni (here a stand-in that takes the call and hangs up) leaves the
      // restart marker; kni-cni sends the call again once the next kni serves.
      let taken = 0;
      const standIn = net.createServer((conn) => {
        taken++;
        conn.destroy();
        standIn.close();
      });
      await new Promise<void>((resolve) => standIn.listen(g.cniSocket, resolve));
      const again = cniAsync('ADD', env('drain-b', g.makePodNetns('drain-b')), c);
      await waitFor(() => taken === 1, 5_000, () => 'kni-cni never reached the stand-in');
      await new Promise((resolve) => setTimeout(resolve, 300));
      await g.launch();
      const r2 = await again;
      assert.equal(r2.code, 0, r2.raw);
      assert.deepEqual(r2.out.ips.map((i: any) => i.address), ['10.87.0.5/24']);
      assert.equal(taken, 1);
    } finally {
      g.cleanup();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('STATUS answers 50 when the pod ranges are exhausted', async () => {
    const small = await TestDaemon.start({ ranges: ['10.98.0.0/30'], bridge: 'kni30' });
    try {
      const c = { ...conf, cniVersion: '1.1.0', socket: small.cniSocket };
      const n = small.makePodNetns('only');
      assert.equal(cni('ADD', env('only', n), c).code, 0);
      const st = cni('STATUS', {}, c);
      assert.equal(st.code, 1);
      assert.equal(st.out.code, 50);
      assert.match(st.out.msg, /exhausted/);
      const more = cni('ADD', env('more', small.makePodNetns('more')), c);
      assert.equal(more.out.code, 11);
      assert.match(more.out.msg, /10\.98\.0\.0\/30 is exhausted/);
    } finally {
      small.cleanup();
    }
  });

  it('writes the conflist and installs kni-cni only once the node is ready, and --uninstall removes them', async () => {
    const g = await TestDaemon.start({ bridge: 'kniinst', ranges: ['10.97.0.0/24'] });
    const confDir = `${g.dir}/net.d`;
    const binDir = `${g.dir}/bin`;
    try {
      await g.stop();
      const cfg = JSON.parse(fs.readFileSync(g.configFile, 'utf8'));
      fs.writeFileSync(g.configFile, JSON.stringify({ ...cfg, reconcileSeconds: 1, cni: { ...cfg.cni, confDir, binDir } }));
      // Another plugin's config that a runtime would take first (name order).
      fs.mkdirSync(confDir);
      fs.writeFileSync(`${confDir}/05-other.conflist`, '{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge"}]}');
      await g.launch();
      await waitFor(() => g.output.includes('sorts before'), 10_000, () => g.output.slice(-2000));
      const warn = g.output.split('\n').filter((l) => l.includes('sorts before')).map((l) => JSON.parse(l))[0];
      assert.equal(warn.level, 'warn');
      assert.equal(warn.file, `${confDir}/05-other.conflist`);
      assert.match(warn.msg, /a CNI-calling runtime takes the first config in .*, so pods get that network, not kni's/);
      // One place to look: GetNode and knictl node carry it too.
      assert.deepEqual((await g.rt().GetNode()).warnings, [warn.msg]);
      const shown = spawnSync(process.execPath, [path.join(packageRoot(), 'dist/plugin/knictl.js'), '--socket', g.socket, 'node'], { encoding: 'utf8' });
      assert.ok(shown.stdout.includes(`warnings:\n- ${warn.msg}\n`), shown.stdout);
      // Looked at again as often as reconcile runs (1 s here): gone, the warning goes; a config
      // added later is found.
      fs.rmSync(`${confDir}/05-other.conflist`);
      await waitFor(async () => (await g.rt().GetNode()).warnings.length === 0, 10_000, () => 'the warning stayed after the file went');
      fs.writeFileSync(`${confDir}/00-late.conf`, '{"cniVersion":"1.0.0","name":"late","type":"bridge"}');
      await waitFor(async () => (await g.rt().GetNode()).warnings.some((w: string) => w.startsWith(`${confDir}/00-late.conf sorts before 10-kni.conflist`)), 10_000, () => 'a config added later was not found');
      const list = JSON.parse(fs.readFileSync(`${confDir}/10-kni.conflist`, 'utf8'));
      assert.equal(list.name, 'kni');
      assert.equal(list.plugins[0].type, 'kni-cni');
      assert.equal(list.plugins[0].socket, g.cniSocket);
      assert.equal(fs.statSync(`${binDir}/kni-cni`).mode & 0o777, 0o755);
      // The installed binary works as the runtime would run it.
      assert.equal(spawnSync(`${binDir}/kni-cni`, [], { env: { CNI_COMMAND: 'VERSION' }, input: '{}', encoding: 'utf8' }).status, 0);
      assert.deepEqual([list.cniVersion, list.cniVersions], ['1.0.0', ['1.0.0', '1.1.0']]);
      assert.deepEqual((await g.rt().GetNode()).cni_config, { file: `${confDir}/10-kni.conflist`, cni_version: '1.0.0, 1.1.0', plugins: ['kni-cni'] });
      // Removed behind kni's back, or made another plugin's: written again at reconcile's pace (1 s
      // here), and said where one looks.
      fs.rmSync(`${confDir}/10-kni.conflist`);
      fs.rmSync(`${binDir}/kni-cni`);
      await waitFor(() => fs.existsSync(`${confDir}/10-kni.conflist`) && fs.existsSync(`${binDir}/kni-cni`), 10_000, () => g.output.slice(-2000));
      assert.deepEqual(JSON.parse(fs.readFileSync(`${confDir}/10-kni.conflist`, 'utf8')), list);
      fs.writeFileSync(`${confDir}/10-kni.conflist`, '{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge"}]}');
      await waitFor(() => JSON.parse(fs.readFileSync(`${confDir}/10-kni.conflist`, 'utf8')).plugins[0].type === 'kni-cni', 10_000, () => g.output.slice(-2000));
      const repairs = (await g.rt().GetNode()).repairs.map((r: any) => r.what);
      assert.ok(repairs.includes(`${binDir}/kni-cni is gone; ${confDir}/10-kni.conflist is gone (kni's CNI config, written again)`), repairs.join('\n'));
      assert.ok(repairs.includes(`${confDir}/10-kni.conflist no longer runs kni-cni on ${g.cniSocket} (kni's CNI config, written again)`), repairs.join('\n'));
      assert.match(g.output, /"level":"warn","msg":"kni's CNI config was changed behind its back: written again"/);
      // A mesh's CNI agent chains its plugin into kni's conflist (as istio-cni does): kni
      // started again keeps it after its own, drops what is no plugin config, and names a CNI
      // version every chained plugin it can ask takes (one built before CNI 1.1 answers VERSION
      // without 1.1.0).
      const mesh = { type: 'istio-cni', log_level: 'info', kubernetes: { kubeconfig: '/etc/cni/net.d/ZZZ-istio-cni-kubeconfig' } };
      const oldMesh = { type: 'old-mesh' };
      fs.writeFileSync(`${binDir}/old-mesh`, '#!/bin/sh\necho \'{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}\'\n', { mode: 0o755 });
      fs.writeFileSync(`${confDir}/10-kni.conflist`, JSON.stringify({ ...list, plugins: [{ ...list.plugins[0], socket: '/stale.sock' }, mesh, 7, oldMesh] }));
      await g.stop();
      await g.launch();
      await waitFor(() => JSON.parse(fs.readFileSync(`${confDir}/10-kni.conflist`, 'utf8')).plugins[0].socket === g.cniSocket, 10_000, () => g.output.slice(-2000));
      const chained = JSON.parse(fs.readFileSync(`${confDir}/10-kni.conflist`, 'utf8'));
      assert.deepEqual([chained.cniVersion, chained.cniVersions, chained.plugins], ['1.0.0', undefined, [list.plugins[0], mesh, oldMesh]], g.output.split('\n').filter((l) => /CNI config|chained|CNI version/.test(l)).join('\n'));
      assert.match(g.output, /"msg":"keeping the plugins chained into kni's CNI config".*"plugins":\["istio-cni","old-mesh"\]/);
      assert.match(g.output, /"msg":"cannot ask plugins chained into kni's CNI config which CNI versions they take.*"plugins":\["istio-cni"\]/);
      // One place to look: GetNode and knictl node say what the runtime reads.
      assert.deepEqual((await g.rt().GetNode()).cni_config, { file: `${confDir}/10-kni.conflist`, cni_version: '1.0.0', plugins: ['kni-cni', 'istio-cni', 'old-mesh'] });
      const node = spawnSync(process.execPath, [path.join(packageRoot(), 'dist/plugin/knictl.js'), '--socket', g.socket, 'node'], { encoding: 'utf8' });
      assert.ok(node.stdout.includes(`CNI config: ${confDir}/10-kni.conflist (CNI 1.0.0): kni-cni → istio-cni → old-mesh\n`), node.stdout);
      // Written again as it is, the file is not touched (a watching agent is not woken) — also
      // when a chained plugin does not answer VERSION this time: it is taken to take what the
      // file names, never widened to 1.1.0.
      const mtime = fs.statSync(`${confDir}/10-kni.conflist`).mtimeMs;
      fs.writeFileSync(`${binDir}/old-mesh`, '#!/bin/sh\nexit 1\n', { mode: 0o755 });
      await g.stop();
      await g.launch();
      const kept = () => g.output.split('\n').filter((l) => l.includes('"msg":"keeping the plugins chained')).length;
      await waitFor(() => kept() === 2, 10_000, () => g.output.slice(-2000));
      assert.equal(fs.statSync(`${confDir}/10-kni.conflist`).mtimeMs, mtime, `rewritten:\n${fs.readFileSync(`${confDir}/10-kni.conflist`, 'utf8')}\n${g.output.split('\n').filter((l) => /CNI config|chained|CNI version/.test(l)).join('\n')}`);
      assert.match(g.output, /"msg":"cannot ask plugins chained into kni's CNI config which CNI versions they take[^"]*taken to take what the file names now".*"plugins":\["istio-cni","old-mesh"\].*"named":\["1\.0\.0"\]/);
      await g.stop();
      // The DaemonSet's preStop: without its pod named it refuses; when the API cannot say
      // whether kni leaves the node (the DaemonSet stays through a rolling update), the files stay.
      const main = path.join(packageRoot(), 'dist/plugin/main.js');
      const unnamed = spawnSync(process.execPath, [main, '--config', g.configFile, '--uninstall-if-leaving'], { encoding: 'utf8', env: { ...process.env, KNI_POD_NAME: '' } });
      assert.equal(unnamed.status, 1);
      assert.match(unnamed.stderr, /--uninstall-if-leaving needs KNI_POD_NAMESPACE and KNI_POD_NAME/);
      const kubeconfig = `${g.dir}/unreachable.kubeconfig`;
      fs.writeFileSync(kubeconfig, 'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n');
      const unsure = spawnSync(process.execPath, [main, '--config', g.configFile, '--uninstall-if-leaving'], { encoding: 'utf8', env: { ...process.env, KUBECONFIG: kubeconfig, KNI_POD_NAMESPACE: 'kube-system', KNI_POD_NAME: 'kni-x' } });
      assert.equal(unsure.status, 0, unsure.stderr);
      assert.match(unsure.stdout, /"level":"warn","msg":"cannot tell whether kni leaves this node: its CNI config and kni-cni stay.*get Pod kube-system\/kni-x/);
      assert.ok(fs.existsSync(`${confDir}/10-kni.conflist`) && fs.existsSync(`${binDir}/kni-cni`));
      const u = spawnSync('nsenter', [`--net=${g.nodeNetns}`, process.execPath, main, '--state-dir', g.stateDir, '--config', g.configFile, '--uninstall'], { encoding: 'utf8' });
      assert.equal(u.status, 0, u.stderr);
      assert.ok(!fs.existsSync(`${confDir}/10-kni.conflist`));
      assert.ok(!fs.existsSync(`${binDir}/kni-cni`));
    } finally {
      g.cleanup();
    }
  });
});
