// What a pod can do to its node and its neighbours, tried as a pod would on the real kernel
// (plugin/node/node-guards.ts): send with another pod's, the gateway's or an outside source
// address (a pod with CAP_NET_RAW can; here it binds non-locally), and reach the peer probe's
// port. Routed and bridged pods, both families.
import assert from 'node:assert/strict';
import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { Client } from '../plugin/client/clients';
import { CONNECTION_DEADLINE_MS, MAX_CONNECTIONS, PeerProbe } from '../plugin/node/peer-probe';
import { packageRoot } from '../plugin/server/protos';
import { cni } from './helpers/cni-exec';
import { rejectsWith } from './helpers/expect';
import { addressesOf, newPod, TestPod } from './helpers/pods';
import { arrivedFrom, senderOf, Sender } from './helpers/forge';
import { ping, RUN, sh, trySh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

/** Whether a TCP connection from the netns to address:port is established within 2 s. */
const connects = (netns: string, address: string, port: number): boolean =>
  trySh('nsenter', [`--net=${netns}`, 'timeout', '2', 'bash', '-c', `exec 3<>/dev/tcp/${address}/${port}`]).ok;

for (const podLink of ['routed', 'bridge'] as const) {
  describe(`a pod cannot send with a source address that is not its own (${podLink} pods)`, () => {
    let d: TestDaemon;
    let rt: Client;
    let kni: Client;
    let a: TestPod;
    let b: TestPod;
    let c: TestPod;
    let sa: Sender;
    /** Where a pod's frames to c go first: the routed host end (its fixed MAC), or c itself across the bridge. */
    let toC: string;

    before(async () => {
      d = await TestDaemon.start({ podLink, sourceCheck: { optOutNamespaces: ['net-tools'] } });
      rt = d.rt();
      kni = d.kni();
      a = await newPod(kni, rt, `${podLink}-sa`);
      b = await newPod(kni, rt, `${podLink}-sb`);
      c = await newPod(kni, rt, `${podLink}-sc`);
      sa = senderOf(a.netns, a.net.interfaces[0].mac);
      toC = podLink === 'routed' ? 'ee:ee:ee:ee:ee:ee' : c.net.interfaces[0].mac;
    });
    after(() => d?.cleanup());

    it("another pod's, the gateway's and an outside address arrive nowhere, IPv4 and IPv6; its own address works", () => {
      const [b4, b6] = addressesOf(b.net);
      const [a4, a6] = addressesOf(a.net);
      const [c4, c6] = addressesOf(c.net);
      for (const [from, to] of [[b4, c4], ['10.244.0.1', c4], ['8.8.8.8', c4], [b6, c6], ['fd00:10:244::1', c6], ['2001:4860:4860::8888', c6]]) {
        assert.equal(arrivedFrom(sa, from, to, toC, c.netns), 0, `a packet from ${from} (forged) reached ${to}`);
      }
      assert.equal(arrivedFrom(sa, a4, c4, toC, c.netns), 2, 'the pod cannot reach another pod from its own IPv4 address');
      assert.equal(arrivedFrom(sa, a6, c6, toC, c.netns), 2, 'the pod cannot reach another pod from its own IPv6 address');
      assert.ok(ping(a.netns, '10.244.0.1') && ping(a.netns, 'fd00:10:244::1'), 'the pod cannot reach its gateways');
      const counters = sh('ip', ['netns', 'exec', d.nodeNetnsName, 'nft', 'list', 'chain', podLink === 'routed' ? 'inet' : 'bridge', 'kni', 'pod-source']);
      assert.match(counters, /counter packets [1-9]\d* bytes \d+ drop/, 'the drops are not counted');
    });

    it('the check comes back when its table is deleted (reconcile), and stays across kill -9 and restart', async () => {
      const [b4] = addressesOf(b.net);
      const [c4] = addressesOf(c.net);
      sh('ip', ['netns', 'exec', d.nodeNetnsName, 'nft', 'delete', 'table', podLink === 'routed' ? 'inet' : 'bridge', 'kni']);
      assert.equal(arrivedFrom(sa, b4, c4, toC, c.netns), 2, 'without the table the forged packets arrive: the test would not see a missing check');
      const r = await rt.Reconcile({});
      assert.ok(r.findings.some((f: any) => /nftables table \w+ kni .* is missing/.test(JSON.stringify(f))), JSON.stringify(r.findings));
      assert.equal(arrivedFrom(sa, b4, c4, toC, c.netns), 0, 'reconcile did not put the check back');
      await d.stop('SIGKILL');
      assert.equal(arrivedFrom(sa, b4, c4, toC, c.netns), 0, 'the check went with kni');
      d.closeClients();
      await d.launch();
      rt = d.rt();
      kni = d.kni();
      assert.equal(arrivedFrom(sa, b4, c4, toC, c.netns), 0, 'the check is gone after a restart');
      assert.ok(ping(a.netns, c4), 'the pod lost its own traffic across the restart');
    });

    it('a static IP (CNI ips capability) is the pod\'s own; detach takes the pod\'s end out of the sets', () => {
      const netns = d.makePodNetns(`${podLink}-static`);
      const conf = { cniVersion: '1.0.0', name: 'kni', type: 'kni-cni', socket: d.cniSocket, runtimeConfig: { ips: ['10.244.0.77/24'] } };
      const env = { CNI_CONTAINERID: `${podLink}-static`, CNI_NETNS: netns, CNI_IFNAME: 'eth0', CNI_ARGS: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${podLink}-static` };
      const add = cni('ADD', env, conf);
      assert.equal(add.code, 0, add.raw);
      const veth = add.out.interfaces[0].name;
      const [c4] = addressesOf(c.net);
      assert.equal(arrivedFrom(senderOf(netns, add.out.interfaces[1].mac), '10.244.0.77', c4, toC, c.netns), 2, 'the static address is refused');
      const family = podLink === 'routed' ? 'inet' : 'bridge';
      assert.match(sh('ip', ['netns', 'exec', d.nodeNetnsName, 'nft', 'list', 'set', family, 'kni', 'src4']), new RegExp(`"${veth}" \\. 10\\.244\\.0\\.77`));
      assert.equal(cni('DEL', env, conf).code, 0);
      for (const set of ['ends', 'src4', 'src6']) assert.doesNotMatch(sh('ip', ['netns', 'exec', d.nodeNetnsName, 'nft', 'list', 'set', family, 'kni', set]), new RegExp(veth), `${set} keeps the detached pod's end`);
    });

    it('kni.dev/source-check: "off" lets a pod of an allowed namespace send any source; elsewhere it is refused with the reason', async () => {
      const annotations = { 'kni.dev/source-check': 'off' };
      const { netns_path } = await kni.CreateNetwork({ name: `${podLink}-router`, namespace: 'net-tools' });
      const router = await rt.Attach({ sandbox_id: `${podLink}-router`, netns_path, pod: { name: 'router', namespace: 'net-tools', uid: 'u' }, annotations });
      assert.equal(router.interfaces.length, 1);
      const [b4] = addressesOf(b.net);
      const [c4] = addressesOf(c.net);
      assert.equal(arrivedFrom(senderOf(netns_path, router.interfaces[0].mac), b4, c4, toC, c.netns), 2, "the router pod's forwarded sources are dropped");
      const other = await kni.CreateNetwork({ name: `${podLink}-sneaky`, namespace: 'default' });
      await rejectsWith(rt.Attach({ sandbox_id: `${podLink}-sneaky`, netns_path: other.netns_path, pod: { name: 'sneaky', namespace: 'default', uid: 'u' }, annotations }), grpc.status.INVALID_ARGUMENT, /kni\.dev\/source-check: "off" is honoured only in the namespaces kni's config lists in sourceCheck\.optOutNamespaces \(net-tools\), not in default/);
      await rejectsWith(rt.Attach({ sandbox_id: `${podLink}-sneaky`, netns_path: other.netns_path, pod: { name: 'sneaky', namespace: 'default', uid: 'u' }, annotations: { 'kni.dev/source-check': 'maybe' } }), grpc.status.INVALID_ARGUMENT, /is not "on" or "off"/);
    });
  });
}

describe("the peer probe's port: other nodes' kni only, and bounded", () => {
  const port = 21000 + (process.pid % 20000);
  let d: TestDaemon;
  let listener: ChildProcess | undefined;
  before(async () => {
    d = await TestDaemon.start({ podLink: 'routed', peerProbe: { port, intervalSeconds: 30, timeoutSeconds: 3 } });
  });
  after(() => {
    listener?.kill('SIGKILL');
    d?.cleanup();
  });

  it('a pod cannot connect, however often it tries; the node itself can; kni keeps serving', async () => {
    // A probe listener on the pods' gateway in the node netns, as the node agent runs one.
    listener = spawn('nsenter', [`--net=${d.nodeNetns}`, process.execPath, path.join(packageRoot(), 'dist/test/helpers/probe-in-netns.js'), 'listen', '10.244.0.1', String(port), '0'], { stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    listener.stdout!.on('data', (b) => (out += b));
    await waitFor(() => out.includes('listening'), 20_000, () => out);
    const pod = await newPod(d.kni(), d.rt(), 'probe-port-pod');
    assert.ok(connects(d.nodeNetns, '10.244.0.1', port), 'the node cannot reach its own probe port');
    assert.ok(!connects(pod.netns, '10.244.0.1', port), 'a pod reached the probe port');
    // Thousands of attempts: each is dropped before any socket; pods still attach, GetNode answers.
    const flood = trySh('nsenter', [`--net=${pod.netns}`, process.execPath, '-e', `
      const net = require('node:net'); let n = 0;
      for (let i = 0; i < 3000; i++) { const s = net.connect(${port}, '10.244.0.1'); s.on('connect', () => n++); s.on('error', () => {}); }
      setTimeout(() => { console.log(n); process.exit(0); }, 3000);`]);
    assert.equal(flood.out.trim(), '0', `a pod's connections were established: ${flood.out}`);
    const another = await newPod(d.kni(), d.rt(), 'probe-port-pod2');
    assert.equal(another.net.interfaces.length, 1);
    assert.equal((await d.rt().GetNode({})).ready, true);
  });

  it('only the peers\' gateways it is given connect; a change of peers writes only the difference', async () => {
    // Two netns: a node and a peer, joined by a veth; the peer tries from two addresses.
    const node = `${RUN}-gn`;
    const peer = `${RUN}-gp`;
    let guards: ChildProcess | undefined;
    let probe: ChildProcess | undefined;
    try {
      sh('ip', ['netns', 'add', node]);
      sh('ip', ['netns', 'add', peer]);
      sh('ip', ['-n', node, 'link', 'add', 'g0', 'type', 'veth', 'peer', 'name', 'g1', 'netns', peer]);
      sh('ip', ['-n', node, 'addr', 'add', '10.77.0.1/16', 'dev', 'g0']);
      sh('ip', ['-n', peer, 'addr', 'add', '10.77.1.1/16', 'dev', 'g1']);
      sh('ip', ['-n', peer, 'addr', 'add', '10.77.1.2/16', 'dev', 'g1']);
      for (const [ns, dev] of [[node, 'g0'], [peer, 'g1']]) {
        sh('ip', ['-n', ns, 'link', 'set', dev, 'up']);
        sh('ip', ['-n', ns, 'link', 'set', 'lo', 'up']);
      }
      guards = spawn('ip', ['netns', 'exec', node, process.execPath, path.join(packageRoot(), 'dist/test/helpers/guards-in-netns.js'), String(port), '10.77.1.1'], { stdio: ['pipe', 'pipe', 'inherit'] });
      let said = '';
      guards.stdout!.on('data', (b) => (said += b));
      await waitFor(() => said.includes('ready'), 20_000, () => said);
      probe = spawn('ip', ['netns', 'exec', node, process.execPath, path.join(packageRoot(), 'dist/test/helpers/probe-in-netns.js'), 'listen', '10.77.0.1', String(port), '0'], { stdio: ['pipe', 'pipe', 'inherit'] });
      let heard = '';
      probe.stdout!.on('data', (b) => (heard += b));
      await waitFor(() => heard.includes('listening'), 20_000, () => heard);
      const from = (src: string): boolean => trySh('ip', ['netns', 'exec', peer, process.execPath, path.join(packageRoot(), 'dist/test/helpers/probe-in-netns.js'), 'probe', '10.77.0.1', src, String(port), '1']).out.includes('"answers"');
      assert.ok(from('10.77.1.1'), 'a peer gateway cannot connect');
      assert.ok(!from('10.77.1.2'), 'an address that is no peer gateway connects');
      said = '';
      guards.stdin!.write('peers 10.77.1.2\n');
      await waitFor(() => said.includes('ok') || said.includes('error'), 10_000, () => said);
      assert.equal(said.trim(), 'ok');
      assert.ok(from('10.77.1.2'), 'the new peer cannot connect');
      assert.ok(!from('10.77.1.1'), 'the peer gone can still connect');
    } finally {
      guards?.kill('SIGKILL');
      probe?.kill('SIGKILL');
      trySh('ip', ['netns', 'del', node]);
      trySh('ip', ['netns', 'del', peer]);
    }
  });

  it(`a listener holds at most ${MAX_CONNECTIONS} connections, each at most ${CONNECTION_DEADLINE_MS / 1000} s, and says once that it refuses more`, async function () {
    this.timeout(60_000);
    const p = new PeerProbe(() => ({ port: port + 1, intervalSeconds: 30, timeoutSeconds: 2 }), 'kni test');
    const lines: string[] = [];
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
      if (String(chunk).includes('peer probe:')) lines.push(String(chunk));
      return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
    }) as typeof process.stdout.write;
    const fds = (): number => fs.readdirSync('/proc/self/fd').length;
    let client: ChildProcess | undefined;
    try {
      p.listen(['127.0.0.1']);
      await new Promise((r) => setTimeout(r, 200));
      const before = fds();
      // Another process opens four times the cap and never closes its side (nor reads to the end).
      client = spawn(process.execPath, ['-e', `
        const net = require('node:net'); let open = 0;
        for (let i = 0; i < ${4 * MAX_CONNECTIONS}; i++) {
          const s = net.connect({ port: ${port + 1}, host: '127.0.0.1', allowHalfOpen: true });
          s.on('connect', () => console.log('open', ++open)); s.on('error', () => {});
        }
        setTimeout(() => {}, 60000);`], { stdio: ['ignore', 'pipe', 'inherit'] });
      let opened = '';
      client.stdout!.on('data', (b) => (opened += b));
      await waitFor(() => opened.includes(`open ${4 * MAX_CONNECTIONS}\n`), 20_000, () => opened.slice(-200));
      await new Promise((r) => setTimeout(r, 300));
      const held = fds() - before;
      assert.ok(held <= MAX_CONNECTIONS + 2, `the listener holds ${held} descriptors for one client's ${4 * MAX_CONNECTIONS} connections`);
      assert.equal(lines.filter((l) => l.includes('new ones are closed at once')).length, 1, lines.join(''));
      await waitFor(() => fds() - before <= 2, CONNECTION_DEADLINE_MS + 15_000, () => `${fds() - before} descriptors still held`);
    } finally {
      process.stdout.write = write;
      client?.kill('SIGKILL');
      p.stop();
    }
  });
});
