// kni's probe of each peer's pod network in the node-agent cluster (node-agent.cluster.ts sets up
// who-1 on kc-w1 and who-2 on kc-w2, on two subnets behind the router netns kc-wire, and calls
// this): every 2 s through a live ConfigMap edit; vxlan's UDP port dropped by the router, then
// only its large packets (an MTU black hole), then let through again.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { waitFor } from '../helpers/wait';
import { CL, knictlTrace, kubectl, kubectlJson, peerRoutes } from './cluster-helpers';
import { fetchFrom, podIps } from './whoami';

export async function peerProbeChecks(): Promise<void> {
  const original: string = kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-config').data['config.yaml'];
  const edit = (text: string) => kubectl('-n', 'kube-system', 'patch', 'configmap', 'kni-config', '--type', 'merge', '-p', JSON.stringify({ data: { 'config.yaml': text } }));
  const probes = (w: string, peer: string) => peerRoutes(w).filter((r: any) => r.node === peer).map((r: any) => r.probe);
  const all = (state: string) => probes('w1', 'kc-w2').join() === `${state},${state}` && probes('w2', 'kc-w1').join() === `${state},${state}`;
  const routesNow = () => JSON.stringify([peerRoutes('w1'), peerRoutes('w2')]);
  const [a4] = podIps('who-1');
  const [b4] = podIps('who-2');
  // What the router between the subnets drops of vxlan's packets: all, or those over 1400 bytes.
  const wire = (op: string, ...match: string[]) => {
    for (const tool of ['iptables', 'ip6tables']) execFileSync('ip', ['netns', 'exec', 'kc-wire', tool, op, 'FORWARD', '-p', 'udp', '--dport', '8472', ...match, '-j', 'DROP']);
  };
  const large = ['-m', 'length', '--length', '1401:65535'];
  const events = (node: string, reason: string) => kubectlJson('get', 'events', '--field-selector', `involvedObject.name=${node},reason=${reason}`).items.map((e: any) => `${e.type} ${e.message}`).join('\n');
  const knictlNode = () => execFileSync(process.execPath, ['dist/plugin/knictl.js', '--socket', `${CL}/w1/root/run/kni/kni.sock`, 'node'], { encoding: 'utf8' });
  try {
    edit(`${original}\npeerProbe: {intervalSeconds: 2, timeoutSeconds: 1}\n`);
    await waitFor(() => all('answers'), 30_000, routesNow);
    // The port is the peers' kni's only: a pod reaches neither its own node's listener nor another's.
    const gatewayOf = (ip: string) => ip.replace(/\.\d+$/, '.1');
    for (const target of [gatewayOf(a4), gatewayOf(b4)]) {
      let out = '';
      try {
        out = kubectl('exec', 'who-1', '--', '/bin/busybox', 'sh', '-c', `echo probe | /bin/busybox nc -w 2 ${target} 9275`);
      } catch (e) {
        out = String((e as { stderr?: string }).stderr ?? e);
      }
      assert.doesNotMatch(out, /bytes=/, `a pod reached kni's probe port at ${target}: ${out.slice(0, 200)}`);
    }
    const metrics = execFileSync('ip', ['netns', 'exec', 'kc-w1', 'curl', '-s', '-m', '5', 'http://127.0.0.1:9273/metrics'], { encoding: 'utf8' });
    assert.match(metrics, /^kni_peer_probes\{state="answers"\} 2$/m);

    wire('-I');
    try {
      await waitFor(() => all('silent'), 30_000, routesNow);
      assert.match(fetchFrom('who-1', b4), /^\(no answer/);
      const text = knictlNode();
      assert.match(text, /; probes: 2 silent$/m);
      assert.match(text, /^kc-w2 .* installed +SILENT since \d\d:\d\d:\d\d +no answer from 10\.244\.\d+\.\d+ port 9275 within 1 s$/m);
      const t = knictlTrace('w1', 'who-1', b4);
      assert.equal(t.ok, false, JSON.stringify(t));
      await waitFor(() => /^Warning kni's probe of node kc-w2's pod network \(10\.244\.[^)]+\) through kni's route gets no answer \(no answer from \S+ port 9275 within 1 s\): what is between the nodes drops pods' packets/m.test(events('kc-w1', 'PeerPodNetworkSilent')), 30_000, () => events('kc-w1', 'PeerPodNetworkSilent'));
      assert.match(t.hops[1].problem, /^kni's probe of node kc-w2's pod network through this route has had no answer since \S+ \(no answer from \S+ port 9275 within 1 s\): vxlan's UDP port 8472 must pass between this node and node kc-w2, both ways \(a firewall, or a cloud security group\?\)$/);
    } finally {
      wire('-D');
    }
    await waitFor(() => all('answers'), 30_000, routesNow);
    assert.equal(fetchFrom('who-1', b4), a4);
    await waitFor(() => /^Normal kni's probe of node kc-w1's pod network \([^)]+\) answers again$/m.test(events('kc-w2', 'PeerPodNetworkAnswers')), 30_000, () => events('kc-w2', 'PeerPodNetworkAnswers'));
    assert.match(execFileSync('cat', [`${CL}/run/kni-w1.log`], { encoding: 'utf8' }), /"msg":"a peer's pod network answers kni's probe again"/);

    // An MTU black hole: the handshake and pods' small exchanges pass, full-sized packets not.
    wire('-I', ...large);
    try {
      await waitFor(() => all('small-only'), 30_000, routesNow);
      assert.equal(fetchFrom('who-1', b4), a4, "a small exchange between pods passes");
      const text = knictlNode();
      assert.match(text, /; probes: 2 small-only$/m);
      assert.match(text, /^kc-w2 .* installed +SMALL-ONLY since \d\d:\d\d:\d\d +connected to 10\.244\.\d+\.\d+ port 9275, but \d+ of the 9216 bytes its kni sends back in full-sized packets arrived within 1 s$/m);
      const t = knictlTrace('w1', 'who-1', b4);
      assert.equal(t.ok, false, JSON.stringify(t));
      assert.match(t.hops[1].problem, /^kni's probe of node kc-w2's pod network through this route has connected, but not got its full-sized packets, since \S+ \(connected to .*\): small packets pass between the nodes and full-sized ones are lost, an MTU black hole: .* Set mtu in kni's config to what the path takes \(less 50 bytes with vxlan\), or let that ICMP through$/);
      await waitFor(() => /^Warning kni's probe of node kc-w2's pod network \(10\.244\.[^)]+\) through kni's route connects, but its full-sized packets are lost \(connected to .*\): small packets pass between the nodes and full-sized ones are lost, an MTU black hole/m.test(events('kc-w1', 'PeerPodNetworkLosesLargePackets')), 30_000, () => events('kc-w1', 'PeerPodNetworkLosesLargePackets'));
    } finally {
      wire('-D', ...large);
    }
    await waitFor(() => all('answers'), 30_000, routesNow);
  } finally {
    edit(original);
  }
}
