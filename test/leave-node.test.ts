// kni leaving its node (kni-runtime --uninstall, the preStop of a deleted DaemonSet): with a pod
// still on its network everything stays; with none, the node network (bridge, routes to other
// nodes' pods, vxlan device, iptables chains) and the state go with the conflist and kni-cni,
// so the next network finds the node as it was. A kni started again is back.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../plugin/server/protos';
import { cni } from './helpers/cni-exec';
import { masqueradeTable } from './helpers/masquerade-table';
import { inNetns, RUN, sh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

describe('kni leaving its node (real kernel, iptables)', () => {
  const files = `/tmp/${RUN}-leave`;
  const confDir = `${files}/net.d`;
  const binDir = `${files}/bin`;
  const uplink = `${RUN}up`;
  after(() => fs.rmSync(files, { recursive: true, force: true }));

  it('keeps everything while a pod is on its network, and takes its node network and state away once none is', async () => {
    const g = await TestDaemon.start({ ranges: ['10.93.0.0/24', 'fd00:93::/64'], allowPodForwarding: true, reconcileSeconds: 1, cni: { confDir, binDir } });
    const ns = g.nodeNetnsName;
    const conf = { cniVersion: '1.0.0', name: 'kni', type: 'kni-cni', socket: g.cniSocket };
    const env = (id: string, netns: string) => ({ CNI_CONTAINERID: id, CNI_NETNS: netns, CNI_IFNAME: 'eth0', CNI_ARGS: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${id};K8S_POD_UID=u-${id}` });
    const uninstall = () => spawnSync('nsenter', [`--net=${g.nodeNetns}`, process.execPath, path.join(packageRoot(), 'dist/plugin/main.js'), '--state-dir', g.stateDir, '--config', g.configFile, '--uninstall'], { encoding: 'utf8' });
    const links = () => sh('ip', ['-n', ns, '-o', 'link', 'show']);
    const kniRoutes = () => ['-4', '-6'].map((f) => sh('ip', ['-n', ns, f, 'route', 'show', 'proto', '107'])).join('');
    const kniChains = () => ['iptables-save', 'ip6tables-save'].map((t) => inNetns(g.nodeNetns, t, []).out).join('').split('\n').filter((l) => l.includes('KNI-'));
    try {
      // What the node agent adds for other nodes: a route to a peer's pods (host-gw) and the
      // vxlan device. An uplink of the node's own, which stays.
      sh('ip', ['-n', ns, 'link', 'add', uplink, 'type', 'veth', 'peer', 'name', `${uplink}p`]);
      sh('ip', ['-n', ns, 'addr', 'add', '192.168.93.1/24', 'dev', uplink]);
      for (const l of [uplink, `${uplink}p`]) sh('ip', ['-n', ns, 'link', 'set', l, 'up']);
      sh('ip', ['-n', ns, 'route', 'add', '10.94.0.0/24', 'via', '192.168.93.2', 'proto', '107']);
      sh('ip', ['-n', ns, 'link', 'add', 'kni.vxlan', 'type', 'vxlan', 'id', '4096', 'dstport', '8472', 'local', '192.168.93.1']);
      await waitFor(() => fs.existsSync(`${confDir}/10-kni.conflist`), 10_000, () => g.output.slice(-2000));
      const podNetns = g.makePodNetns('leave');
      const add = cni('ADD', env('leave', podNetns), { ...conf, runtimeConfig: { portMappings: [{ hostPort: 8093, containerPort: 80, protocol: 'tcp' }] } });
      assert.equal(add.code, 0, add.raw);
      assert.ok(kniChains().some((l) => l.includes('KNI-HOSTPORTS')), kniChains().join('\n'));

      // Uninstalled with the daemon running: the files go at once, the rest when it stops; a pod
      // is still there, so nothing more goes.
      let u = uninstall();
      assert.equal(u.status, 0, u.stderr);
      assert.match(u.stdout, /"msg":"kni-runtime is running: it removes its node network and state when it stops, if no pod is left on its network"/);
      assert.ok(!fs.existsSync(`${confDir}/10-kni.conflist`) && !fs.existsSync(`${binDir}/kni-cni`));
      assert.ok(fs.existsSync(`${g.stateDir}/leaving`));
      // Uninstalled, its files are not put back as ones removed behind its back are; it says so.
      await waitFor(async () => (await g.rt().GetNode()).warnings.some((w: string) => w.startsWith('kni was uninstalled')), 10_000, () => g.output.slice(-2000));
      await new Promise((r) => setTimeout(r, 1500));
      assert.ok(!fs.existsSync(`${confDir}/10-kni.conflist`) && !fs.existsSync(`${binDir}/kni-cni`));
      await g.stop();
      assert.match(g.output, /"msg":"kni leaves this node with pods on its network: their interfaces stay.*"records":1/);
      assert.match(links(), /: kni0: /);
      assert.ok(masqueradeTable(g.nodeNetns), 'the masquerade table is gone though a pod is left on the network');
      assert.ok(fs.existsSync(`${g.stateDir}/sandboxes.log`));

      // Started again, kni is back; the pod is still its own.
      await g.launch();
      assert.match(g.output, /"msg":"kni is back on this node \(it had been uninstalled while running\)"/);
      assert.ok(!fs.existsSync(`${g.stateDir}/leaving`));
      assert.ok(!(await g.rt().GetNode()).warnings.some((w: string) => w.startsWith('kni was uninstalled')));
      assert.equal(cni('DEL', env('leave', podNetns), conf).code, 0);

      // No pod left: everything kni made on the node goes when it stops.
      u = uninstall();
      assert.equal(u.status, 0, u.stderr);
      await g.stop();
      const left = g.output.split('\n').filter((l) => l.includes('"msg":"kni left this node')).map((l) => JSON.parse(l));
      assert.equal(left.length, 1, g.output.slice(-3000));
      assert.deepEqual(left[0].removed, ['route to 10.94.0.0/24', 'vxlan device kni.vxlan', 'bridge kni0', 'masquerade table', 'forwarding rules', 'host port rules', "kni's nftables tables"]);
      assert.equal(left[0].stateDir, 'removed');
      assert.doesNotMatch(inNetns(g.nodeNetns, 'nft', ['list', 'tables']).out, /table (inet|bridge) kni\b/);
      assert.doesNotMatch(g.output, /could not remove/);
      assert.doesNotMatch(links(), /: (kni0|kni\.vxlan)[:@]/);
      assert.match(links(), new RegExp(`: ${uplink}[:@]`));
      assert.equal(kniRoutes(), '');
      assert.deepEqual(kniChains(), []);
      assert.ok(!fs.existsSync(g.stateDir) && !fs.existsSync(g.socket) && !fs.existsSync(g.cniSocket));

      // Stopped without being uninstalled, everything stays; --uninstall with no daemon running
      // then does it all itself. A pod whose sandbox went while no kni ran (its netns gone with
      // it) holds nothing: its record does not keep kni on the node.
      await g.launch();
      await waitFor(() => fs.existsSync(`${confDir}/10-kni.conflist`), 10_000, () => g.output.slice(-2000));
      const gone = g.makePodNetns('gone');
      assert.equal(cni('ADD', env('gone', gone), conf).code, 0);
      await g.stop();
      assert.match(links(), /: kni0: /);
      assert.ok(kniChains().length > 0);
      sh('ip', ['netns', 'del', path.basename(gone)]);
      assert.deepEqual(await g.kniVethsSettled(0), []);
      // An extension's registration belongs to its agent, not to kni: it stays.
      fs.mkdirSync(`${g.stateDir}/extensions`, { recursive: true });
      fs.writeFileSync(`${g.stateDir}/extensions/mesh.json`, '{}');
      u = uninstall();
      assert.equal(u.status, 0, u.stderr);
      assert.match(u.stdout, /"msg":"kni left this node: its node network and state are removed".*"stateDir":"emptied but for extensions"/);
      assert.doesNotMatch(links(), /: kni0: /);
      assert.deepEqual(kniChains(), []);
      assert.deepEqual(fs.readdirSync(g.stateDir), ['extensions']);
      assert.ok(!fs.existsSync(`${confDir}/10-kni.conflist`));
    } finally {
      g.cleanup();
    }
  });
});
