// Host ports on the built-in network (the CNI portMappings capability here; KNI POC and
// PodNetworkLifecycle hand the same mappings to the core): DNAT from the node's addresses to
// the pod, hairpin from a pod, rules gone with the pod, and after a crash that missed the DEL.
import assert from 'node:assert/strict';
import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import { cni } from './helpers/cni-exec';
import { knictl } from './helpers/knictl';
import { arrivedFrom, senderOf } from './helpers/forge';
import { inNetns, RUN, sh, trySh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

describe('host ports (real kernel, iptables)', () => {
  let d: TestDaemon;
  let conf: Record<string, unknown>;
  const client = `${RUN}-hpclient`;
  const www = `/tmp/${RUN}-www`;
  const servers: ChildProcess[] = [];
  const env = (id: string, netns: string) => ({ CNI_CONTAINERID: id, CNI_NETNS: netns, CNI_IFNAME: 'eth0', CNI_ARGS: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${id};K8S_POD_UID=u-${id}` });

  before(async () => {
    d = await TestDaemon.start({ cni: { confDir: '', binDir: '' } });
    conf = { cniVersion: '1.0.0', name: 'kni', type: 'kni-cni', socket: d.cniSocket };
    // Another host on a link to the node: 192.168.90.2 → node 192.168.90.1.
    sh('ip', ['netns', 'add', client]);
    sh('ip', ['link', 'add', `${RUN}hp0`, 'netns', d.nodeNetnsName, 'type', 'veth', 'peer', 'name', `${RUN}hp1`, 'netns', client]);
    sh('ip', ['-n', d.nodeNetnsName, 'addr', 'add', '192.168.90.1/24', 'dev', `${RUN}hp0`]);
    sh('ip', ['-n', d.nodeNetnsName, 'link', 'set', `${RUN}hp0`, 'up']);
    sh('ip', ['-n', client, 'addr', 'add', '192.168.90.2/24', 'dev', `${RUN}hp1`]);
    sh('ip', ['-n', client, 'link', 'set', `${RUN}hp1`, 'up']);
    sh('ip', ['-n', client, 'link', 'set', 'lo', 'up']);
    fs.mkdirSync(www, { recursive: true });
    fs.writeFileSync(`${www}/index.html`, 'hello through a host port\n');
  });
  after(() => {
    for (const s of servers) s.kill('SIGKILL');
    trySh('ip', ['netns', 'del', client]);
    fs.rmSync(www, { recursive: true, force: true });
    d?.cleanup();
  });

  function serve(netns: string, port = 80): void {
    const s = spawn('nsenter', [`--net=${netns}`, '/bin/busybox', 'httpd', '-f', '-p', String(port), '-h', www], { stdio: 'ignore' });
    servers.push(s);
  }
  const fetch = (fromNetns: string, host: string, port: number): string =>
    inNetns(fromNetns, '/bin/busybox', ['sh', '-c', `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 3 ${host} ${port}`]).out;
  const chain = (name: string) => inNetns(d.nodeNetns, 'iptables', ['-t', 'nat', '-S', name]).out.split('\n').filter((l) => l.startsWith('-A'));

  it('a pod asking for host port 8080 answers on the node\'s address, from another host, the node itself and another pod; DEL takes the rules away', async () => {
    const netns = d.makePodNetns('hp-a');
    const r = cni('ADD', env('hp-a', netns), { ...conf, runtimeConfig: { portMappings: [{ hostPort: 8080, containerPort: 80, protocol: 'tcp' }] } });
    assert.equal(r.code, 0, r.raw);
    const podIp = r.out.ips[0].address.split('/')[0];
    serve(netns);
    await waitFor(() => /hello through a host port/.test(fetch(netns, '127.0.0.1', 80)), 10_000, () => 'the pod\'s server never answered');
    assert.match(chain('KNI-HOSTPORTS').join('\n'), new RegExp(`--dport 8080 .*--to-destination ${podIp.replace(/\./g, '\\.')}:80`));
    // The client's link is new: its first exchange may wait on neighbour resolution.
    await waitFor(() => /hello through a host port/.test(fetch(`/run/netns/${client}`, '192.168.90.1', 8080)), 15_000, () => `from another host: ${fetch(`/run/netns/${client}`, '192.168.90.1', 8080)}\n${chain('KNI-HOSTPORTS').join('\n')}`);
    assert.match(fetch(d.nodeNetns, '192.168.90.1', 8080), /hello through a host port/, 'from the node itself');
    const other = d.makePodNetns('hp-b');
    assert.equal(cni('ADD', env('hp-b', other), conf).code, 0);
    assert.match(fetch(other, '192.168.90.1', 8080), /hello through a host port/, 'from another pod (hairpin through the node)');
    // The same host port for a second pod is refused, taking nothing. Asked the way containerd
    // (go-cni) sends it: Go field names, no json tags.
    const clash = cni('ADD', env('hp-c', d.makePodNetns('hp-c')), { ...conf, runtimeConfig: { portMappings: [{ HostPort: 8080, ContainerPort: 81, Protocol: 'tcp', HostIP: '' }] } });
    assert.equal(clash.code, 1);
    assert.match(clash.out.msg, /host port tcp\/8080 is already mapped to sandbox hp-a/);

    assert.equal(cni('DEL', env('hp-a', netns), conf).code, 0);
    assert.deepEqual(chain('KNI-HOSTPORTS'), []);
    assert.deepEqual(chain('KNI-HOSTPORTS-SNAT'), []);
    assert.doesNotMatch(fetch(`/run/netns/${client}`, '192.168.90.1', 8080), /hello/);
    assert.equal(cni('DEL', env('hp-b', other), conf).code, 0);
  });

  it('knictl trace to the node\'s address and a port: a host port names its pod and kni\'s rule (gone: the problem), then the pod; a socket of the node listening; nothing there (refused)', async () => {
    const trace = (...args: string[]) => {
      const r = knictl('--socket', d.socket, 'trace', ...args, '-o', 'json');
      assert.ok(r.status === 0 || r.status === 2, r.stderr);
      return JSON.parse(r.stdout);
    };
    const netns = d.makePodNetns('hp-t');
    const r = cni('ADD', env('hp-t', netns), { ...conf, runtimeConfig: { portMappings: [{ hostPort: 8090, containerPort: 80, protocol: 'tcp' }] } });
    assert.equal(r.code, 0, r.raw);
    const podIp = r.out.ips[0].address.split('/')[0];
    try {
      const t = trace('--from-node', '192.168.90.1', '--port', '8090');
      assert.deepEqual([t.kind, t.ok], ['host-port', true], JSON.stringify(t));
      assert.equal(t.hops[0].what, `192.168.90.1 is this node's own address (${RUN}hp0); port 8090/TCP is a host port of pod default/hp-t: kni's KNI-HOSTPORTS sends it to ${podIp} port 80/TCP`);
      assert.match(t.hops[1].what, /^pod default\/hp-t on this node \(sandbox hp-t, eth0\), through host veth /);
      // From a pod (hairpin through the node): the same.
      const other = d.makePodNetns('hp-u');
      assert.equal(cni('ADD', env('hp-u', other), conf).code, 0);
      assert.equal(trace('hp-u', '192.168.90.1', '--port', '8090').hops[1].what, t.hops[0].what);
      // kni's rule deleted behind its back: the problem, and what puts it back.
      const rule = chain('KNI-HOSTPORTS').find((l) => l.includes('--dport 8090'))!;
      sh('ip', ['netns', 'exec', d.nodeNetnsName, 'sh', '-c', `iptables -t nat ${rule.replace(/^-A /, '-D ')}`]);
      const gone = trace('--from-node', '192.168.90.1', '--port', '8090');
      assert.deepEqual([gone.ok, gone.hops.length, gone.hops[0].problem], [false, 1, "kni's DNAT rule for it is missing from the nat table's KNI-HOSTPORTS chain (knictl reconcile writes it again)"], JSON.stringify(gone));
      knictl('--socket', d.socket, 'reconcile');
      assert.equal(trace('--from-node', '192.168.90.1', '--port', '8090').ok, true);
      // No host port: a socket of the node, or nothing (a connection refused). UDP the same.
      const none = trace('--from-node', '192.168.90.1', '--port', '8091');
      assert.deepEqual([none.kind, none.ok, none.hops[0].problem], ['node', false, "nothing on this node takes 8091/TCP: no pod's host port, no socket listening on it (a connection is refused)"], JSON.stringify(none));
      assert.equal(trace('hp-u', '192.168.90.1', '--port', '8091/udp').hops[1].problem, "nothing on this node takes 8091/UDP: no pod's host port, no socket listening on it");
      serve(d.nodeNetns, 8091);
      await waitFor(() => trace('--from-node', '192.168.90.1', '--port', '8091').ok, 10_000, () => 'the node\'s own server never listened');
      assert.equal(trace('--from-node', '192.168.90.1', '--port', '8091').hops[0].what, `192.168.90.1 is this node's own address (${RUN}hp0); a socket of the node listens on 8091/TCP (ss -lntup names its process)`);
      assert.equal(cni('DEL', env('hp-u', other), conf).code, 0);
    } finally {
      cni('DEL', env('hp-t', netns), conf);
    }
  });

  it("the node's own ports: a reserved one and one a node process listens on are refused with the reason; the node keeps them", async () => {
    // A kubelet-like listener on 10250 (reserved) and another service of the node on 12345.
    serve(d.nodeNetns, 10250);
    serve(d.nodeNetns, 12345);
    await waitFor(() => /hello/.test(fetch(d.nodeNetns, '127.0.0.1', 10250)) && /hello/.test(fetch(d.nodeNetns, '127.0.0.1', 12345)), 10_000, () => 'the node listeners never answered');
    for (const [port, protocol, why] of [[10250, 'tcp', /port 10250 is in reservedHostPorts/], [10256, 'tcp', /port 10256 is in reservedHostPorts/], [12345, 'tcp', /a process of the node listens on tcp\/12345/]] as const) {
      const id = `hp-own${port}`;
      const r = cni('ADD', env(id, d.makePodNetns(id)), { ...conf, runtimeConfig: { portMappings: [{ hostPort: port, containerPort: 80, protocol }] } });
      assert.notEqual(r.code, 0, r.raw);
      assert.match(r.out.msg, new RegExp(`host port ${protocol}/${port} is the node's own`));
      assert.match(r.out.msg, why);
    }
    assert.deepEqual(chain('KNI-HOSTPORTS'), [], 'a refused pod left a rule');
    assert.match(fetch(d.nodeNetns, '127.0.0.1', 10250), /hello/, "the node's 10250 no longer answers on loopback");
    assert.match(fetch(`/run/netns/${client}`, '192.168.90.1', 10250), /hello/, "another host no longer reaches the node's 10250");
  });

  it('invalid port mappings are refused with a precise error', () => {
    const cases: [unknown, RegExp][] = [
      [[{ hostPort: -1, containerPort: 80 }], /hostPort -1 is not a port/],
      [[{ hostPort: 70000, containerPort: 80 }], /hostPort 70000 is not a port/],
      [[{ hostPort: 8081, containerPort: 70000 }], /containerPort 70000 is not a port/],
      [[{ hostPort: 8081, containerPort: 80, protocol: 'icmp' }], /protocol "icmp" is not tcp, udp or sctp/],
      [[{ hostPort: 8081, containerPort: 80 }, { hostPort: 8081, containerPort: 81 }], /host port tcp\/8081 is mapped twice/],
      [[{ hostPort: 8081, containerPort: 80, hostIP: 'nope' }], /hostIP "nope" is not an address/],
    ];
    for (const [i, [portMappings, re]] of cases.entries()) {
      const x = cni('ADD', env(`hp-bad${i}`, d.makePodNetns(`hp-bad${i}`)), { ...conf, runtimeConfig: { portMappings } });
      assert.equal(x.code, 1, x.raw);
      assert.match(x.out.msg, re);
    }
  });

  it('kni killed, the pod gone meanwhile (no DEL): the restart finds the host port and removes it', async () => {
    const netns = d.makePodNetns('hp-crash');
    assert.equal(cni('ADD', env('hp-crash', netns), { ...conf, runtimeConfig: { portMappings: [{ hostPort: 9090, containerPort: 80, protocol: 'udp' }] } }).code, 0);
    assert.equal(chain('KNI-HOSTPORTS').length, 1);
    await d.stop('SIGKILL');
    sh('ip', ['netns', 'del', netns.split('/').pop()!]);
    d.closeClients();
    await d.launch();
    await waitFor(() => chain('KNI-HOSTPORTS').length === 0, 20_000, () => chain('KNI-HOSTPORTS').join('\n'));
    assert.equal((await d.rt().ListPods({})).pods.length, 0);
  });
});

describe('host ports from the node on 127.0.0.1 and ::1 (real kernel)', () => {
  const www = `/tmp/${RUN}-www-lo`;
  before(() => {
    fs.mkdirSync(www, { recursive: true });
    fs.writeFileSync(`${www}/index.html`, 'hello on loopback\n');
  });
  after(() => fs.rmSync(www, { recursive: true, force: true }));

  for (const podLink of ['routed', 'bridge'] as const) {
    it(`127.0.0.1:<host port> and [::1]:<host port> on the node reach the pod (${podLink}); a pod cannot reach the node's 127.0.0.1 through the way this opens`, async () => {
      const d = await TestDaemon.start({ podLink, cni: { confDir: '', binDir: '' } });
      let server: ChildProcess | undefined;
      try {
        const conf = { cniVersion: '1.0.0', name: 'kni', type: 'kni-cni', socket: d.cniSocket };
        const netns = d.makePodNetns(`lo-${podLink}`);
        const env = { CNI_CONTAINERID: `lo-${podLink}`, CNI_NETNS: netns, CNI_IFNAME: 'eth0', CNI_ARGS: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=lo-${podLink}` };
        const r = cni('ADD', env, { ...conf, runtimeConfig: { portMappings: [{ hostPort: 12000, containerPort: 80, protocol: 'tcp' }] } });
        assert.equal(r.code, 0, r.raw);
        server = spawn('nsenter', [`--net=${netns}`, '/bin/busybox', 'httpd', '-f', '-p', '80', '-h', www], { stdio: 'ignore' });
        const get = (host: string): string => inNetns(d.nodeNetns, '/bin/busybox', ['sh', '-c', `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | /bin/busybox nc -w 3 ${host} 12000`]).out;
        await waitFor(() => /hello on loopback/.test(get('127.0.0.1')), 15_000, () => `127.0.0.1:12000 from the node: ${get('127.0.0.1')}`);
        // [::1] through kni's relay (the kernel cannot carry it), answered by the pod over IPv6.
        const get6 = (): string => inNetns(d.nodeNetns, 'bash', ['-c', "exec 3<>/dev/tcp/::1/12000 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && timeout 3 cat <&3"]).out;
        await waitFor(() => /hello on loopback/.test(get6()), 15_000, () => `[::1]:12000 from the node: ${get6()}`);
        // The way 127.0.0.1 now leaves the node (route_localnet) does not let a pod in to the
        // node's loopback services: an echo to 127.0.0.1 from the pod, to its first hop's MAC.
        const hop = podLink === 'routed' ? 'ee:ee:ee:ee:ee:ee' : JSON.parse(inNetns(d.nodeNetns, 'ip', ['-j', 'link', 'show', 'kni0']).out)[0].address;
        const pod = senderOf(netns, r.out.interfaces[1].mac);
        const own = r.out.ips[0].address.split('/')[0];
        assert.equal(arrivedFrom(pod, own, '127.0.0.1', hop, d.nodeNetns), 0, "a pod's packet to 127.0.0.1 reached the node");
        sh('ip', ['netns', 'exec', d.nodeNetnsName, 'nft', 'delete', 'chain', 'inet', 'kni', 'localnet']);
        assert.equal(arrivedFrom(pod, own, '127.0.0.1', hop, d.nodeNetns), 2, 'without the guard the echo does not arrive either: the test sees nothing');
      } finally {
        server?.kill('SIGKILL');
        d.cleanup();
      }
    });
  }
});
