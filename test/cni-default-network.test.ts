// A CNI conflist as kni's default network (defaultNetwork.cni): kni in front of the plugins a
// cluster already has (Debian's reference plugins: bridge + host-local + portmap + tuning).
// Every entry point reaches it; the core keeps records, rollback, release, CHECK, GC.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { Client } from '../plugin/client/clients';
import { cni } from './helpers/cni-exec';
import { rejectsWith } from './helpers/expect';
import { inNetns, netnsLinks, ping, RUN, sh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { knictl } from './helpers/knictl';
import { installTestPlugin } from './helpers/test-plugins';
import { stateRecords } from './helpers/state-records';
import type { NetworkRuntime } from '../plugin/core/network-runtime';
import { networkStatus } from '../plugin/kube/pod-networks';
import { parseConfig } from '../plugin/core/config';
import { waitFor } from './helpers/wait';

describe('a CNI conflist as the default network', () => {
  let d: TestDaemon;
  let rt: Client;
  const dir = `/tmp/${RUN}-cnidef`;
  const conflistFile = `${dir}/chain.conflist`;
  const recordLog = `${dir}/record.log`;
  /** What the last plugin of the chain was given on its last call of `cmd` for a container. */
  const recorded = (cmd: string, containerId: string) =>
    fs.readFileSync(recordLog, 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((l) => l.cmd === cmd && l.containerId === containerId).at(-1);
  const ipamFiles = () => (fs.existsSync(`${dir}/ipam/chain`) ? fs.readdirSync(`${dir}/ipam/chain`).filter((f) => /^\d/.test(f)) : []);
  const veths = () => sh('ip', ['-n', d.nodeNetnsName, '-o', 'link', 'show', 'type', 'veth']).trim();
  const dnat = () => inNetns(d.nodeNetns, 'iptables', ['-t', 'nat', '-S']).out.split('\n').filter((l) => l.includes('8089'));

  before(async () => {
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(conflistFile, JSON.stringify({
      cniVersion: '1.0.0',
      name: 'chain',
      plugins: [
        { type: 'bridge', bridge: 'cni-k1', isGateway: true, ipMasq: false, dns: { nameservers: ['10.78.0.53'], search: ['chain.example'] }, ipam: { type: 'host-local', dataDir: `${dir}/ipam`, ranges: [[{ subnet: '10.78.0.0/24' }]], routes: [{ dst: '0.0.0.0/0' }] } },
        { type: 'portmap', capabilities: { portMappings: true } },
        { type: 'tuning', sysctl: { 'net.ipv4.conf.eth0.arp_notify': '1' } },
        { type: 'kni-test-record', capabilities: { cgroupPath: true }, logFile: recordLog },
      ],
    }));
    installTestPlugin(`${dir}/bin`, 'kni-test-record', 'record-cni');
    d = await TestDaemon.start({ defaultNetwork: { cni: conflistFile, binDirs: ['/usr/lib/cni', `${dir}/bin`] }, cni: { confDir: '', binDir: '' }, vmTap: true });
    rt = d.rt();
  });
  after(() => {
    d?.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function attach(id: string, cgroupParent = ''): Promise<{ netns: string; ip: string }> {
    const netns = d.makePodNetns(id);
    const p = await rt.Attach({ sandbox_id: id, netns_path: netns, pod: { name: id, namespace: 'default', uid: `u-${id}` }, cgroup_parent: cgroupParent });
    return { netns, ip: p.interfaces[0].addresses[0].address };
  }

  it('pods attached over gRPC get addresses from the plugins\' IPAM and reach each other; GetPod and GetNode tell it', async () => {
    assert.equal((await rt.GetNode({})).ready, true);
    const a = await attach('cd-a', '/kubepods/besteffort/podu-cd-a');
    const b = await attach('cd-b');
    // The pod's cgroup parent reaches plugins declaring cgroupPath, as from containerd and CRI-O.
    assert.equal(recorded('ADD', 'cd-a').runtimeConfig.cgroupPath, '/kubepods/besteffort/podu-cd-a');
    assert.deepEqual(recorded('ADD', 'cd-b').runtimeConfig, {});
    await rejectsWith(rt.Attach({ sandbox_id: 'cd-bad', netns_path: d.makePodNetns('cd-bad'), cgroup_parent: 'kubepods\nslice' }), grpc.status.INVALID_ARGUMENT, /cgroup parent "kubepods\\nslice" is not a cgroup path or slice/);
    assert.match(a.ip, /^10\.78\.0\.\d+$/);
    assert.ok(ping(a.netns, b.ip), `${a.ip} cannot ping ${b.ip}`);
    assert.equal(inNetns(a.netns, 'cat', ['/proc/sys/net/ipv4/conf/eth0/arp_notify']).out.trim(), '1', 'tuning, last in the chain, did not run');
    const pod = await rt.GetPod({ sandbox_id: 'cd-a' });
    assert.equal(pod.interfaces[0].addresses[0].prefix_length, 24);
    // The bridge plugin's result carries its config's dns: kept for the Pod's network-status.
    const rec = stateRecords(d.stateDir, 'sandboxes').get('cd-a');
    assert.deepEqual(networkStatus({ defaultBackend: { name: 'chain' } } as unknown as NetworkRuntime, rec)[0].dns, { nameservers: ['10.78.0.53'], search: ['chain.example'] });
    // And in kni's API and knictl, the one place an operator looks.
    assert.deepEqual(pod.interfaces[0].dns, { nameservers: ['10.78.0.53'], domain: '', search: ['chain.example'], options: [] });
    const shown = knictl('--socket', d.socket, 'pod', 'cd-a');
    assert.match(shown.stdout, /\n {2}dns nameserver 10\.78\.0\.53; search chain\.example\n/, shown.stdout + shown.stderr);
    assert.deepEqual((await rt.Check({ sandbox_id: 'cd-a' })).problems, []);
    // IPAM status from the plugins' config: host-local's range and the addresses handed out in it.
    const ipam = await rt.GetIPAMStatus({});
    assert.deepEqual(ipam.ranges.map((r: any) => [r.cidr, r.size, r.used, r.free, r.exhausted]), [['10.78.0.0/24', '253', '2', '251', false]]);
    await rt.Detach({ sandbox_id: 'cd-b' });
    assert.equal(ipamFiles().length, 1);
    assert.equal((await rt.GetIPAMStatus({})).ranges[0].used, '1');
  });

  it('through kni-cni: the plugins\' result in 0.4.0, 1.0.0 and 1.1.0; port mappings reach portmap', () => {
    for (const [i, v] of ['0.4.0', '1.0.0', '1.1.0'].entries()) {
      const id = `cd-shim${i}`;
      const netns = d.makePodNetns(id);
      const env = { CNI_CONTAINERID: id, CNI_NETNS: netns, CNI_IFNAME: 'eth0', CNI_ARGS: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${id};K8S_POD_UID=u` };
      const conf = { cniVersion: v, name: 'kni', type: 'kni-cni', socket: d.cniSocket, ...(i === 0 ? { runtimeConfig: { portMappings: [{ hostPort: 8089, containerPort: 80, protocol: 'tcp' }] } } : { runtimeConfig: { cgroupPath: `kubepods-besteffort-pod${i}.slice` } }) };
      const r = cni('ADD', env, conf);
      assert.equal(r.code, 0, r.raw);
      assert.equal(r.out.cniVersion, v);
      assert.match(r.out.ips[0].address, /^10\.78\.0\.\d+\/24$/);
      assert.equal(r.out.ips[0].version, v === '0.4.0' ? '4' : undefined);
      assert.ok(r.out.interfaces.some((x: any) => x.name === 'cni-k1'), 'not the bridge plugin\'s own result');
      if (i === 0) assert.ok(dnat().length > 0, 'portmap got no port mappings');
      else assert.equal(recorded('ADD', id).runtimeConfig.cgroupPath, `kubepods-besteffort-pod${i}.slice`);
      assert.equal(cni('DEL', env, conf).code, 0);
    }
    assert.deepEqual(dnat(), [], 'portmap DEL did not run with the mappings');
  });

  it('a vm sandbox (vmTap) gets its tap on the plugins\' eth0, as on kni\'s own network; a container none', async () => {
    const netns = d.makePodNetns('cd-vm');
    const p = await rt.Attach({ sandbox_id: 'cd-vm', netns_path: netns, runtime_handler: 'kata' });
    assert.deepEqual([p.kind, p.interfaces[0].vm_tap], ['vm', 'tap0_kni']);
    assert.deepEqual(netnsLinks(netns).sort(), ['eth0', 'lo', 'tap0_kni']);
    // The redirect is in place on the plugins' veth end, both ways.
    assert.match(inNetns(netns, 'tc', ['filter', 'show', 'dev', 'eth0', 'ingress']).out, /mirred \(Egress Redirect to device tap0_kni\)/);
    await rt.Detach({ sandbox_id: 'cd-vm' });
    assert.deepEqual(netnsLinks(netns), ['lo']);
    const ct = d.makePodNetns('cd-ct');
    assert.equal((await rt.Attach({ sandbox_id: 'cd-ct', netns_path: ct })).interfaces[0].vm_tap, '');
    await rt.Detach({ sandbox_id: 'cd-ct' });
  });

  it('kni killed: the detach after the restart runs DEL through the chain with the cached result and leaves nothing', async () => {
    await d.restart('SIGKILL');
    rt = d.rt();
    assert.equal((await rt.ListPods({})).pods.length, 1);
    await rt.Detach({ sandbox_id: 'cd-a' });
    assert.deepEqual(ipamFiles(), []);
    assert.equal(veths(), '');
  });

  it('CHECK reports drift; GC releases what the live list lacks through DEL', async () => {
    const c = await attach('cd-c');
    await attach('cd-keep');
    sh('ip', ['netns', 'exec', c.netns.split('/').pop()!, 'ip', 'addr', 'flush', 'dev', 'eth0']);
    const problems = (await rt.Check({ sandbox_id: 'cd-c' })).problems;
    assert.equal(problems.length, 1);
    assert.match(problems[0], /CNI plugin bridge/);
    const gc = await rt.GarbageCollect({ live_sandbox_ids: ['cd-keep'] });
    assert.deepEqual(gc.released_sandbox_ids, ['cd-c']);
    assert.equal(ipamFiles().length, 1);
    await rt.Detach({ sandbox_id: 'cd-keep' });
    assert.deepEqual(ipamFiles(), []);
  });

  it('the conflist rewritten (as a network\'s own agent does): new pods get the new config, pods wired before are deleted with theirs; a broken rewrite keeps the last good one and says so', async () => {
    const original = fs.readFileSync(conflistFile, 'utf8');
    const changed = (text: string) => {
      fs.writeFileSync(conflistFile, text);
      const later = new Date(Date.now() + 5_000); // a new mtime even within the file system's tick
      fs.utimesSync(conflistFile, later, later);
    };
    const record2 = `${dir}/record2.log`;
    try {
      await attach('rl-old');
      const next = JSON.parse(original);
      next.plugins[3].logFile = record2;
      changed(JSON.stringify(next));
      await waitFor(() => d.output.includes('"msg":"defaultNetwork.cni changed: new pods get the new config'), 10_000, () => d.output.slice(-2000));
      await attach('rl-new');
      assert.match(fs.readFileSync(record2, 'utf8'), /"cmd":"ADD","containerId":"rl-new"/, 'the new pod did not get the new config');
      await rt.Detach({ sandbox_id: 'rl-old' });
      assert.ok(recorded('DEL', 'rl-old'), 'the pod wired before was not deleted with its own config');
      assert.equal(fs.readFileSync(record2, 'utf8').split('\n').filter((l) => l.includes('"rl-old"')).length, 0);
      changed('{"cniVersion": "1.0.0", "name": ');
      await waitFor(async () => (await rt.GetNode({})).warnings.some((w: string) => /defaultNetwork\.cni .* changed but cannot be used \(.*not JSON/.test(w)), 10_000, () => d.output.slice(-2000));
      await attach('rl-broken');
      assert.match(fs.readFileSync(record2, 'utf8'), /"cmd":"ADD","containerId":"rl-broken"/, 'the last good config does not serve on');
      changed(original);
      await waitFor(async () => (await rt.GetNode({})).warnings.length === 0, 10_000, () => d.output.slice(-2000));
      for (const id of ['rl-new', 'rl-broken']) await rt.Detach({ sandbox_id: id });
    } finally {
      if (fs.readFileSync(conflistFile, 'utf8') !== original) changed(original);
    }
  });

  it('a plugin that fails makes the attach fail with its message, and nothing is kept', async () => {
    await rejectsWith(rt.Attach({ sandbox_id: 'cd-bad', netns_path: '/run/netns/does-not-exist', pod: { name: 'x', namespace: 'default', uid: 'u' } }), grpc.status.NOT_FOUND, /does not exist/);
    assert.equal((await rt.ListPods({})).pods.length, 0);
  });
});

describe('defaultNetwork.readinessIndicatorFile (Multus\'s readinessindicatorfile)', () => {
  it('the node is not ready, STATUS says 50 and attaches wait until the default network\'s agent writes the file; gone again, the same', async () => {
    const dir = `/tmp/${RUN}-indicator`;
    const file = `${dir}/agent-ready`;
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(`${dir}/net.conflist`, JSON.stringify({ cniVersion: '1.0.0', name: 'agentnet', plugins: [{ type: 'bridge', bridge: 'cni-k2', isGateway: true, ipam: { type: 'host-local', dataDir: `${dir}/ipam`, ranges: [[{ subnet: '10.76.0.0/24' }]] } }] }));
    // A host path: with chrootDir (here the test's dir stands for the host's root), looked for under it.
    const d = await TestDaemon.start({ defaultNetwork: { cni: `${dir}/net.conflist`, binDirs: ['/usr/lib/cni'], readinessIndicatorFile: '/agent-ready', chrootDir: dir }, cni: { confDir: '', binDir: '' } });
    try {
      const rt = d.rt();
      const conf = { cniVersion: '1.1.0', name: 'kni', socket: d.cniSocket };
      const waiting = new RegExp(`waiting for /agent-ready \\(at ${file}\\) \\(defaultNetwork\\.readinessIndicatorFile\\)`);
      const node = await rt.GetNode({});
      assert.equal(node.ready, false);
      assert.match(node.networks[0].reason, waiting);
      assert.deepEqual([node.default_cni.chroot_dir, node.default_cni.readiness_indicator_file], [dir, '/agent-ready']);
      assert.match(knictl('--socket', d.socket, 'node').stdout, new RegExp(`  plugins found under ${dir} run chrooted there\n  ready once /agent-ready exists\n`));
      const st = cni('STATUS', {}, conf);
      assert.equal(st.out.code, 50);
      assert.match(`${st.out.msg} ${st.out.details}`, waiting);
      const netns = d.makePodNetns('ri-a');
      await rejectsWith(rt.Attach({ sandbox_id: 'ri-a', netns_path: netns }), grpc.status.UNAVAILABLE, waiting);
      fs.writeFileSync(file, '');
      await waitFor(async () => (await rt.GetNode({})).ready, 10_000, () => d.output.slice(-2000));
      assert.equal(cni('STATUS', {}, conf).code, 0);
      assert.match((await rt.Attach({ sandbox_id: 'ri-a', netns_path: netns })).interfaces[0].addresses[0].address, /^10\.76\.0\./);
      fs.rmSync(file);
      assert.equal(cni('STATUS', {}, conf).out.code, 50);
      assert.match((await rt.GetNode({})).networks[0].reason, waiting);
      fs.writeFileSync(file, '');
      await waitFor(async () => (await rt.GetNode({})).ready, 10_000, () => d.output.slice(-2000));
      await rt.Detach({ sandbox_id: 'ri-a' });
    } finally {
      d.cleanup();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('is refused without defaultNetwork.cni: it tells when that network\'s agent is ready', () => {
    assert.throws(() => parseConfig({ defaultNetwork: { readinessIndicatorFile: '/run/flannel/subnet.env' } }), /defaultNetwork\.readinessIndicatorFile goes with defaultNetwork\.cni/);
  });
});

describe('defaultNetwork.cni: auto (Multus\'s way of finding the cluster network)', () => {
  it('waits for the first other CNI config in cni.confDir, runs it for every pod, and writes its own conflist to sort first (00-kni.conflist)', async () => {
    const netd = `/tmp/${RUN}-auto-netd`;
    const dir = `/tmp/${RUN}-auto`;
    fs.mkdirSync(netd, { recursive: true });
    fs.mkdirSync(dir, { recursive: true });
    // The cluster network's agent writes its config 1.5 s after kni started (and a later one that must not be taken).
    const cluster = { cniVersion: '1.0.0', name: 'clusternet', plugins: [{ type: 'bridge', bridge: 'cni-k3', isGateway: true, ipam: { type: 'host-local', dataDir: `${dir}/ipam`, ranges: [[{ subnet: '10.74.0.0/24' }]] } }] };
    // A kni conflist of an earlier confName is never taken: kni would call itself.
    fs.writeFileSync(`${netd}/05-kni-old.conflist`, JSON.stringify({ cniVersion: '1.0.0', name: 'kni', plugins: [{ type: 'kni-cni' }] }));
    let agent: NodeJS.Timeout | undefined;
    let d: TestDaemon | undefined;
    try {
      d = await TestDaemon.start({ defaultNetwork: { cni: 'auto', binDirs: ['/usr/lib/cni'] }, cni: { confDir: netd, binDir: '' }, reconcileSeconds: 1 }, {
        beforeLaunch: () => {
          agent = setTimeout(() => {
            fs.writeFileSync(`${netd}/10-clusternet.conflist`, JSON.stringify(cluster));
            fs.writeFileSync(`${netd}/20-other.conflist`, JSON.stringify({ ...cluster, name: 'other' }));
          }, 1500);
        },
      });
      assert.match(d.output, /"msg":"defaultNetwork.cni is auto: waiting for the cluster network's CNI config/);
      assert.match(d.output, new RegExp(`"msg":"defaultNetwork.cni is auto: the cluster network's config found","file":"${netd}/10-clusternet.conflist"`));
      const daemon = d;
      const rt = daemon.rt();
      const p = await rt.Attach({ sandbox_id: 'auto-a', netns_path: daemon.makePodNetns('auto-a') });
      assert.match(p.interfaces[0].addresses[0].address, /^10\.74\.0\./);
      await waitFor(() => fs.existsSync(`${netd}/00-kni.conflist`), 10_000, () => daemon.output.slice(-2000));
      const node = await rt.GetNode({});
      assert.deepEqual(node.warnings, [], 'kni\'s conflist does not sort first');
      // One place to look: what kni runs as the default network, and how.
      assert.deepEqual(node.default_cni, { file: `${netd}/10-clusternet.conflist`, name: 'clusternet', cni_version: '1.0.0', plugins: ['bridge'], auto: true, chroot_dir: '', readiness_indicator_file: '' });
      assert.ok(knictl('--socket', daemon.socket, 'node').stdout.includes(`default network: clusternet (CNI 1.0.0) from ${netd}/10-clusternet.conflist (found by defaultNetwork.cni: auto): bridge\n`));
      await rt.Detach({ sandbox_id: 'auto-a' });
      // Another network's config now sorts first: kni keeps the one it runs (its pods' cached
      // attachments are under that name) and says to restart to take the new one.
      fs.writeFileSync(`${netd}/07-newnet.conflist`, JSON.stringify({ ...cluster, name: 'newnet' }));
      let last = '';
      const moved = async () => (last = (await rt.GetNode({})).warnings.join('\n'));
      await waitFor(async () => (await moved()).includes(`defaultNetwork.cni is auto and ${netd}/07-newnet.conflist is now the first other config in ${netd}, but kni runs ${netd}/10-clusternet.conflist (found at start), and new pods get that network: restart kni to take 07-newnet.conflist`), 10_000, () => last);
      fs.rmSync(`${netd}/07-newnet.conflist`);
      await waitFor(async () => (await moved()) === '', 10_000, () => last);
    } finally {
      clearTimeout(agent);
      d?.cleanup();
      for (const p of [netd, dir]) fs.rmSync(p, { recursive: true, force: true });
    }
  });

  it('needs cni.confDir', () => {
    assert.throws(() => parseConfig({ defaultNetwork: { cni: 'auto' }, cni: { confDir: '' } }), /defaultNetwork\.cni "auto" looks for the cluster network's config in cni\.confDir, which is empty/);
  });
});

describe('defaultNetwork.cni misconfigured', () => {
  it('kni refuses to start and names the file and every problem', async () => {
    const f = `/tmp/${RUN}-bad.conflist`;
    fs.writeFileSync(f, '{"cniVersion":"7","name":"x","plugins":[]}');
    try {
      await assert.rejects(TestDaemon.start({ defaultNetwork: { cni: f } }), (e: Error) => /defaultNetwork\.cni: .*bad\.conflist: cniVersion "7".*plugins must list/.test(e.message));
    } finally {
      fs.rmSync(f, { force: true });
    }
  });
});
