// End to end with a real containerd + runc: kni is the node's CNI network through kni-cni (and,
// with containerd 2.x, its NRI plugin too). One suite, run for each containerd flavour.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { Client } from '../../plugin/client/clients';
import { ContainerdEnv, Flavour, IMAGE } from './containerd-env';
import { ping, RUN, trySh } from './sh';
import { stateRecords } from './state-records';
import { installTestPlugin } from './test-plugins';
import { TestDaemon } from './test-daemon';
import { waitFor } from './wait';

interface Pod {
  id: string;
  cfg: any;
  ip: string;
  ip6: string;
  netns: string;
}

export function e2eContainerdSuite(flavour: Flavour): void {
describe(`end to end: ${flavour.name} + runc with kni as the CNI network`, function () {
  this.timeout(300_000);
  let d: TestDaemon;
  let c: ContainerdEnv;
  let cri: Client;

  before(async () => {
    c = ContainerdEnv.forRun('', flavour);
    const conf = c.kniConfig();
    // A short CRI reconcile period, so the periodic job is seen to fire (its grace is the same 2 s).
    d = await TestDaemon.start({ ...conf, cri: { ...(conf.cri as object), reconcileSeconds: 2 } });
    c.nodeNetns = d.nodeNetns;
    c.writeConfig();
    // kni writes its conflist (and installs kni-cni) once the node network is ready.
    const list = JSON.parse(fs.readFileSync(`${c.confDir}/10-kni.conflist`, 'utf8'));
    assert.equal(list.plugins[0].type, 'kni-cni');
    assert.ok(fs.existsSync(`${c.binDir}/kni-cni`));
    // A plugin chained after kni-cni, as a mesh's CNI agent appends istio-cni: the runtime runs
    // it with kni's result; kni keeps it when it writes its conflist again (after the kill -9).
    installTestPlugin(c.binDir, 'kni-test-record', 'record-cni');
    fs.writeFileSync(`${c.confDir}/10-kni.conflist`, JSON.stringify({ ...list, plugins: [...list.plugins, { type: 'kni-test-record', logFile: chainLog() }] }));
    await c.start();
    cri = c.cri();
  });
  after(async () => {
    await c?.stop();
    d?.cleanup();
  });

  const chainLog = () => `${c.dir}/chain.log`;
  /** What the chained plugin was given on ADD for a sandbox: the addresses of kni-cni's result. */
  const chainedAdd = (id: string) => fs.readFileSync(chainLog(), 'utf8').trim().split('\n').map((l) => JSON.parse(l)).find((l) => l.cmd === 'ADD' && l.containerId === id);

  const podConfig = (name: string) => ({
    metadata: { name, namespace: 'e2e', uid: `uid-${name}`, attempt: 0 },
    hostname: name,
    log_directory: `${c.dir}/logs/${name}`,
    labels: { app: name },
    annotations: { 'example.com/owner': 'kni-e2e' },
    linux: {},
  });

  async function runPod(name: string): Promise<Pod> {
    const cfg = podConfig(name);
    const { pod_sandbox_id: id } = await cri.RunPodSandbox({ config: cfg });
    const st = await cri.PodSandboxStatus({ pod_sandbox_id: id, verbose: true });
    const spec = JSON.parse(st.info.info).runtimeSpec;
    const netns = spec.linux.namespaces.find((n: any) => n.type === 'network').path;
    return { id, cfg, ip: st.status.network.ip, ip6: st.status.network.additional_ips[0]?.ip ?? '', netns };
  }

  async function runContainer(pod: Pod, name: string, command: string[]): Promise<string> {
    const { container_id } = await cri.CreateContainer({
      pod_sandbox_id: pod.id,
      config: { metadata: { name }, image: { image: IMAGE }, command, log_path: `${name}.log` },
      sandbox_config: pod.cfg,
    });
    await cri.StartContainer({ container_id });
    return container_id;
  }

  async function removePod(p: Pod): Promise<void> {
    await cri.StopPodSandbox({ pod_sandbox_id: p.id });
    await cri.RemovePodSandbox({ pod_sandbox_id: p.id });
  }

  const kniVeths = () => d.nodeLinks().filter((l) => /^kni[0-9a-f]{12}$/.test(l));

  it('RunPodSandbox gives the pod the IPs kni reports; pods ping; a container serves and one in another pod fetches', async () => {
    const web = await runPod('web');
    const client = await runPod('client');
    try {
      const rec = await d.rt().GetPod({ sandbox_id: web.id });
      assert.equal(rec.interfaces[0].addresses[0].address, web.ip);
      assert.equal(rec.interfaces[0].addresses[1].address, web.ip6);
      assert.deepEqual(rec.pod, { name: 'web', namespace: 'e2e', uid: 'uid-web' });
      assert.equal(rec.netns_path, web.netns);
      assert.equal(rec.annotations['example.com/owner'], 'kni-e2e', 'pod annotations did not reach kni');
      assert.notEqual(web.ip, client.ip);
      assert.deepEqual(chainedAdd(web.id)?.prevIps?.map((a: string) => a.split('/')[0]), [web.ip, web.ip6], 'the chained plugin did not get kni-cni\'s result');
      assert.ok(ping(client.netns, web.ip), 'client pod cannot ping web pod over IPv4');
      assert.ok(ping(client.netns, web.ip6), 'client pod cannot ping web pod over IPv6');

      await runContainer(web, 'httpd', ['/bin/busybox', 'httpd', '-f', '-p', '80', '-h', '/www']);
      const sleeper = await runContainer(client, 'sleeper', ['/bin/busybox', 'sleep', '3600']);
      let body = '';
      for (let i = 0; i < 50 && !body.includes('hello'); i++) {
        const r = await cri.ExecSync({ container_id: sleeper, cmd: ['/bin/busybox', 'wget', '-q', '-O', '-', `http://${web.ip}/`], timeout: 5 }); // no -T: Debian's static busybox wget crashes on it
        body = Buffer.from(r.stdout).toString();
        if (!body) await new Promise((res) => setTimeout(res, 100));
      }
      assert.equal(body.trim(), 'hello from kni e2e');
    } finally {
      await removePod(web);
      await removePod(client);
    }
  });

  it('names as a CRI client gives them (capitals, spaces): a pod gets its network; a host-network sandbox is left alone, through NRI too; both go leaving nothing', async () => {
    const meta = (name: string) => ({ name, namespace: 'CriTest', uid: `UID-${name}`, attempt: 0 });
    const ids: string[] = [];
    try {
      const { pod_sandbox_id: podId } = await cri.RunPodSandbox({ config: { ...podConfig('x'), metadata: meta('Web Server') } });
      ids.push(podId);
      // The node's network, so the node's hostname too (runc sets none without a UTS namespace).
      const { pod_sandbox_id: hostId } = await cri.RunPodSandbox({ config: { ...podConfig('x'), hostname: '', metadata: meta('HostNet'), linux: { security_context: { namespace_options: { network: 'NODE' } } } } });
      ids.push(hostId);
      const rec = await d.rt().GetPod({ sandbox_id: podId });
      assert.deepEqual(rec.pod, { name: 'Web Server', namespace: 'CriTest', uid: 'uid-web server' });
      const st = await cri.PodSandboxStatus({ pod_sandbox_id: podId });
      assert.equal(st.status.network.ip, rec.interfaces[0].addresses[0].address);
      await assert.rejects(d.rt().GetPod({ sandbox_id: hostId }), /not attached/, 'kni wired a host-network sandbox');
      assert.equal((await cri.PodSandboxStatus({ pod_sandbox_id: hostId })).status.state, 'SANDBOX_READY');
    } finally {
      for (const id of ids) {
        await cri.StopPodSandbox({ pod_sandbox_id: id });
        await cri.RemovePodSandbox({ pod_sandbox_id: id });
      }
    }
    const listed = (await cri.ListPodSandbox({})).items.map((p: any) => p.id);
    assert.ok(!ids.some((id) => listed.includes(id)), 'a sandbox is still listed');
    const tasks = c.ctr(['-n', 'k8s.io', 'tasks', 'ls']).out;
    assert.ok(!ids.some((id) => tasks.includes(id)), `a pause task was left running:\n${tasks}`);
    assert.equal(kniVeths().length, 0);
  });

  it('Stop + Remove leave no veth, netns, address or record', async () => {
    const p = await runPod('short');
    assert.equal(kniVeths().length, 1);
    await cri.StopPodSandbox({ pod_sandbox_id: p.id });
    assert.equal(kniVeths().length, 0, 'StopPodSandbox left the veth');
    await cri.RemovePodSandbox({ pod_sandbox_id: p.id });
    assert.ok(!fs.existsSync(p.netns), 'netns still pinned');
    assert.equal((await d.rt().GetIPAMStatus()).ranges[0].used, '0');
    assert.deepEqual([...stateRecords(d.stateDir, 'sandboxes').keys()], []);
  });

  it('kill -9 of kni-runtime while pods are being created: earlier pods keep working, later RunPodSandbox calls succeed', async () => {
    const before = await runPod('before-crash');
    const from = d.output.length;
    // Killed from the daemon's own output stream, the moment the first of them is attached (a
    // poll would let overlapping attaches all finish first): the others are then mid-creation.
    const proc = d.proc!;
    let seen = '';
    const aim = (b: Buffer) => {
      seen += b.toString();
      if (/"msg":"attach".*crash-c/.test(seen)) {
        proc.kill('SIGKILL');
        proc.stdout!.off('data', aim);
      }
    };
    proc.stdout!.on('data', aim);
    const names = Array.from({ length: 10 }, (_, i) => `crash-c${i}`);
    const inflight = names.map((n) => runPod(n).then((p) => p, () => undefined));
    let made: Pod[] = [];
    try {
      await waitFor(() => /"msg":"attach".*crash-c/.test(d.output.slice(from)), 60_000, () => 'no crash-* pod reached kni');
      await d.stop('SIGKILL');
      // What kni had attached when it died: a RunPodSandbox whose CNI ADD had already answered
      // still completes after the kill, so the runtime's answers do not tell what was in flight.
      const attachedBeforeKill = (d.output.slice(from).match(/"msg":"attach".*crash-c/g) ?? []).length;
      made = (await Promise.all(inflight)).filter((p): p is Pod => p !== undefined);
      d.closeClients();
      await d.launch();
      assert.ok(attachedBeforeKill < names.length, 'kni had attached every crash-* pod before the kill: nothing was in flight');
    } catch (e) {
      // Whatever happened, the next tests get a runtime without these sandboxes.
      proc.stdout!.off('data', aim);
      if (!d.proc || d.proc.exitCode !== null || d.proc.signalCode !== null) {
        d.closeClients();
        await d.launch().catch(() => undefined);
      }
      for (const s of (await cri.ListPodSandbox({})).items) await removePod({ id: s.id } as Pod).catch(() => undefined);
      throw e;
    }

    const rec = await d.rt().GetPod({ sandbox_id: before.id });
    assert.equal(rec.interfaces[0].addresses[0].address, before.ip);
    assert.ok(ping(before.netns, '10.244.0.1'), 'an earlier pod lost its network');
    const after = await runPod('after-crash');
    assert.ok(ping(after.netns, before.ip));
    // kni wrote its conflist again when it came back: the chained plugin is still there and ran.
    assert.equal(JSON.parse(fs.readFileSync(`${c.confDir}/10-kni.conflist`, 'utf8')).plugins[1]?.type, 'kni-test-record');
    assert.ok(chainedAdd(after.id), 'the chained plugin did not run after kni came back');

    // Every sandbox containerd runs has its network in kni, and kni holds nothing the runtime
    // does not list. A sandbox whose CNI answer the kill cut off is NOTREADY in containerd; kni
    // keeps it if its attach had committed (it has a network), until the runtime tears it down.
    const { items } = await cri.ListPodSandbox({});
    const ready = items.filter((s: any) => s.state === 'SANDBOX_READY').map((s: any) => s.id).sort();
    const listed = new Set(items.map((s: any) => s.id));
    const kniIds = (await d.rt().ListPods()).pods.map((p: any) => p.sandbox_id).sort();
    for (const id of ready) assert.ok(kniIds.includes(id), `running sandbox ${id} has no network in kni`);
    for (const id of kniIds) assert.ok(listed.has(id), `kni holds ${id}, which the runtime does not list`);
    assert.ok(ready.length >= 2 + made.length);
    assert.equal(kniVeths().length, kniIds.length);
    for (const p of [before, after, ...made]) await removePod(p);
    for (const s of (await cri.ListPodSandbox({})).items) await removePod({ id: s.id } as Pod);
    assert.equal(kniVeths().length, 0);
  });

  it('the periodic CRI reconcile releases, while kni runs, a sandbox the runtime does not have', async () => {
    const from = d.output.length;
    const { netns_path } = await d.kni().CreateNetwork({ name: 'ghost', namespace: 'default' });
    await d.rt().Attach({ sandbox_id: 'not-in-containerd', netns_path });
    // cri.reconcileSeconds is 2 here; a sandbox is judged once it is older than that.
    await waitFor(async () => !(await d.rt().ListPods()).pods.some((p: any) => p.sandbox_id === 'not-in-containerd'), 30_000, () => 'still attached');
    assert.match(d.output.slice(from), /reconciled with the runtime: released what it no longer has.*not-in-containerd/);
  });

  it('a sandbox removed while kni-runtime was down is released when it comes back (2.x: once the runtime no longer lists it)', async () => {
    const keep = await runPod('keeper');
    const doomed = await runPod('doomed');
    const doomedVeth = (await d.rt().GetPod({ sandbox_id: doomed.id })).interfaces[0].host_interface;
    await d.stop('SIGKILL');
    // Behind kni's back: the sandbox goes away in containerd, which then restarts.
    const ctr = (...a: string[]) => c.ctr(['-n', 'k8s.io', ...a]);
    ctr('tasks', 'kill', '--signal', 'SIGKILL', doomed.id);
    for (let i = 0; i < 200 && !ctr('tasks', 'delete', doomed.id).ok && ctr('tasks', 'ls', '-q').out.includes(doomed.id); i++) {
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(ctr('containers', 'delete', doomed.id).ok, 'cannot delete the doomed container');
    // containerd 2.x keeps CRI sandboxes in a store of their own: that record goes too.
    if (flavour.v2) assert.ok(ctr('sandboxes', 'rm', doomed.id).ok, 'cannot delete the doomed sandbox');
    await c.stopDaemon();
    await c.start();
    cri = c.cri();
    d.closeClients();
    const from = d.output.length;
    await d.launch();

    const ids = (await d.rt().ListPods()).pods.map((p: any) => p.sandbox_id);
    if (flavour.v2) {
      // containerd 2.x still lists the sandbox (its CRI store outlives the container and sandbox
      // records): kni keeps what the runtime lists, and the runtime's own teardown releases it.
      assert.ok((await cri.ListPodSandbox({})).items.some((x: any) => x.id === doomed.id), 'containerd 2.x no longer lists it: the premise changed');
      assert.deepEqual(ids.sort(), [keep.id, doomed.id].sort());
      await cri.StopPodSandbox({ pod_sandbox_id: doomed.id });
      await cri.RemovePodSandbox({ pod_sandbox_id: doomed.id });
      assert.deepEqual((await d.rt().ListPods()).pods.map((p: any) => p.sandbox_id), [keep.id]);
    } else {
      assert.deepEqual(ids, [keep.id]);
    }
    assert.ok(await d.linkGone(doomedVeth), 'the removed sandbox kept its veth');
    assert.equal((await d.rt().GetIPAMStatus()).ranges[0].used, '1');
    if (!flavour.v2) assert.ok(d.output.slice(from).includes('reconciled with the runtime'), 'no reconcile was logged by this start');
    await removePod(keep);
    trySh('umount', [doomed.netns]);
    fs.rmSync(doomed.netns, { force: true });
  });
});
}

// Keep the run prefix in view: every name this suite makes starts with it.
void RUN;
