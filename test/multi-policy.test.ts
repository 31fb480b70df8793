// MultiNetworkPolicy: the objects read (policy-for, a spec's shape, network-status), compiled per
// network, and enforced on the real kernel inside the pods' own netns on a secondary network.
import assert from 'node:assert/strict';
import { ChildProcess, spawn } from 'node:child_process';
import type * as K8s from '@kubernetes/client-node';
import { compileMultiPolicies, MultiNetworkPolicy, networkAddresses, policyFor, POLICY_FOR_ANNOTATION } from '../plugin/policy/multi-policies';
import { MultiPolicyEnforcer } from '../plugin/policy/multi-policy-enforcer';
import { multiTableScript } from '../plugin/policy/multi-ruleset';
import { PolicyPod } from '../plugin/policy/policy-model';
import type { SandboxRecord } from '../plugin/store/records';
import { RUN, sh, trySh } from './helpers/sh';
import { waitFor } from './helpers/wait';

const NS_LABELS = new Map([['ns1', { 'kubernetes.io/metadata.name': 'ns1' }], ['ns2', { 'kubernetes.io/metadata.name': 'ns2' }]]);
const mnp = (name: string, policyForText: string | undefined, spec: unknown, namespace = 'ns1'): MultiNetworkPolicy =>
  ({ metadata: { name, namespace, ...(policyForText === undefined ? {} : { annotations: { [POLICY_FOR_ANNOTATION]: policyForText } }) }, spec: spec as K8s.V1NetworkPolicySpec });

describe('MultiNetworkPolicy: what is read, compiled per network', () => {
  it('policy-for names networks as namespace/name (a name alone is of the policy\'s namespace); absent or malformed, it is for none and said', () => {
    assert.deepEqual(policyFor('macnet', 'ns1'), { networks: ['ns1/macnet'] });
    assert.deepEqual(policyFor(' ns2/br-net , macnet,macnet ', 'ns1'), { networks: ['ns2/br-net', 'ns1/macnet'] });
    assert.match(policyFor(undefined, 'ns1').problem!, /no k8s.v1.cni.cncf.io\/policy-for annotation/);
    assert.match(policyFor('a/b/c', 'ns1').problem!, /"a\/b\/c" is not a network's name/);
    assert.match(policyFor('Bad_Name', 'ns1').problem!, /is not a network's name/);
  });

  it('a model per network; a policy kni cannot read is left out with the reason (its CRD has no schema to rely on)', () => {
    const m = compileMultiPolicies([
      mnp('deny', 'macnet', { podSelector: {}, policyTypes: ['Ingress'] }),
      mnp('both', 'macnet,ns2/brnet', { podSelector: { matchLabels: { app: 'server' } }, ingress: [{ from: [{ podSelector: {} }], ports: [{ port: 80 }] }] }),
      mnp('none', undefined, { podSelector: {} }),
      mnp('bad-ports', 'macnet', { podSelector: {}, ingress: [{ ports: 'eighty' }] }),
      mnp('bad-peer', 'macnet', { podSelector: {}, egress: [{ to: [{ ipBlock: { cidr: 10 } }] }] }),
      mnp('bad-selector', 'macnet', { podSelector: { matchLabels: { a: 1 } } }),
      mnp('bad-type', 'macnet', { podSelector: {}, policyTypes: ['Sideways'] }),
    ], NS_LABELS);
    assert.deepEqual([...m.networks.keys()], ['ns1/macnet', 'ns2/brnet']);
    assert.deepEqual(m.networks.get('ns1/macnet')!.policies.map((p) => p.name), ['ns1/both', 'ns1/deny']);
    assert.deepEqual(m.networks.get('ns2/brnet')!.policies.map((p) => p.name), ['ns1/both']);
    assert.deepEqual(m.problems, [
      'ns1/none: no k8s.v1.cni.cncf.io/policy-for annotation: it is for no network',
      'ns1/bad-ports: spec.ingress[0].ports is not a list',
      'ns1/bad-peer: spec.egress[0].to[0].ipBlock needs a cidr',
      'ns1/bad-selector: spec.podSelector.matchLabels is not a map of strings',
      'ns1/bad-type: spec.policyTypes lists other than Ingress and Egress',
    ]);
    // Each network's sets are named apart: one pod may be on both.
    const sets = [...m.networks.values()].map((x) => x.policies.flatMap((p) => (p.ingress ?? []).map((r) => r.set)));
    assert.equal(new Set(sets.flat()).size, sets.flat().length);
  });

  it("a pod's addresses per network from its network-status; what is not a secondary network's entry or not JSON is passed over", () => {
    const pod = (status: string): K8s.V1Pod => ({ metadata: { annotations: { 'k8s.v1.cni.cncf.io/network-status': status } } });
    const status = JSON.stringify([{ name: 'kni', interface: 'eth0', ips: ['10.0.0.5'] }, { name: 'ns1/macnet', interface: 'net1', ips: ['192.168.7.5', 'fd00::5'] }, { name: 'ns1/x', ips: 'no' }, 7]);
    assert.deepEqual([...networkAddresses(pod(status))], [['ns1/macnet', ['192.168.7.5', 'fd00::5']]]);
    assert.equal(networkAddresses(pod('{not json')).size, 0);
    assert.equal(networkAddresses({}).size, 0);
  });

  it("a pod's table: its interfaces on networks with policies, judged at input and output by name; peers by their addresses on that network", () => {
    const m = compileMultiPolicies([mnp('from-client', 'macnet', { podSelector: { matchLabels: { app: 'server' } }, ingress: [{ from: [{ podSelector: { matchLabels: { app: 'client' } } }] }] })], NS_LABELS);
    const server: PolicyPod = { namespace: 'ns1', name: 'b', labels: { app: 'server' }, ips: ['10.0.0.2'], ports: [] };
    const client: PolicyPod = { namespace: 'ns1', name: 'a', labels: { app: 'client' }, ips: ['192.168.7.1'], ports: [] };
    const text = multiTableScript(m, server, [{ name: 'net1', network: 'ns1/macnet', ips: ['192.168.7.2'] }, { name: 'net2', network: 'ns1/other', ips: ['192.168.8.2'] }], (n) => (n === 'ns1/macnet' ? [client] : []));
    assert.match(text, /set m0p0-i0-4 \{ type ipv4_addr; elements = \{ 192\.168\.7\.1 \} \}/);
    assert.match(text, /chain in-0 \{\n {4}ip saddr \{ 192\.168\.7\.2 \} accept\n {4}ip saddr @m0p0-i0-4 accept comment "ns1\/from-client"/);
    assert.match(text, /type filter hook input priority filter; policy accept;\n {4}ct state established,related accept\n {4}iifname "net1" jump in-0\n/);
    assert.doesNotMatch(text, /net2|hook output/, 'an interface with no policy, and a direction none isolates, are not judged');
    assert.equal(multiTableScript(m, { ...server, labels: {} }, [{ name: 'net1', network: 'ns1/macnet', ips: [] }], () => []), 'table inet kni-multi-policy {}\ndelete table inet kni-multi-policy\n');
  });
});

describe('MultiNetworkPolicy on the real kernel: pods on a secondary network (a bridge), judged in their own netns', function () {
  this.timeout(120_000);
  const node = `${RUN}-mn`;
  const bridge = `${RUN}br`.slice(-15);
  const NETWORK = 'ns1/brnet';
  const PODS = { a: { app: 'client' }, b: { app: 'server' }, c: { app: 'other' } } as const;
  type Name = keyof typeof PODS;
  const ip = (p: Name) => `192.168.77.${['a', 'b', 'c'].indexOf(p) + 2}`;
  const netns = (p: Name) => `${RUN}-m${p}`;
  const servers: ChildProcess[] = [];
  const enforcer = new MultiPolicyEnforcer();
  const view = (p: Name): PolicyPod => ({ namespace: 'ns1', name: p, labels: { ...PODS[p] }, ips: [`10.9.0.${['a', 'b', 'c'].indexOf(p) + 2}`], ports: p === 'b' ? [{ name: 'http', port: 8080, protocol: 'TCP' }] : [] });
  const rec = (p: Name): SandboxRecord => ({
    id: `${RUN}-sb-${p}`, phase: 'attached', pod: { namespace: 'ns1', name: p, uid: p }, labels: {}, annotations: {}, runtimeHandler: '', netnsPath: `/run/netns/${netns(p)}`, ownedNetns: '', createdAt: new Date().toISOString(),
    interfaces: [{ name: 'net1', hostVeth: '', mac: '', mtu: 0, network: NETWORK, backend: 'cni', addresses: [{ family: 4, address: ip(p), prefixLength: 24, gateway: '', range: '' }] }],
  });
  const connects = (from: Name, to: Name, port: number): boolean => trySh('nsenter', [`--net=/run/netns/${netns(from)}`, 'timeout', '2', 'bash', '-c', `exec 3<>/dev/tcp/${ip(to)}/${port}`]).ok;
  const reach = (pairs: [Name, Name, number][]) => Object.fromEntries(pairs.map(([f, t, p]) => [`${f}->${t}:${p}`, connects(f, t, p)]));
  const model = (...ps: MultiNetworkPolicy[]) => compileMultiPolicies(ps, NS_LABELS);

  before(async () => {
    sh('ip', ['netns', 'add', node]);
    sh('ip', ['-n', node, 'link', 'add', bridge, 'type', 'bridge']);
    sh('ip', ['-n', node, 'link', 'set', bridge, 'up']);
    for (const p of ['a', 'b', 'c'] as Name[]) {
      const end = `${RUN}e${p}`.slice(-15);
      sh('ip', ['netns', 'add', netns(p)]);
      sh('ip', ['-n', node, 'link', 'add', end, 'master', bridge, 'type', 'veth', 'peer', 'name', 'net1', 'netns', netns(p)]);
      sh('ip', ['-n', node, 'link', 'set', end, 'up']);
      for (const args of [['link', 'set', 'lo', 'up'], ['link', 'set', 'net1', 'up'], ['addr', 'add', `${ip(p)}/24`, 'dev', 'net1']]) sh('ip', ['-n', netns(p), ...args]);
      servers.push(spawn('nsenter', [`--net=/run/netns/${netns(p)}`, process.execPath, '-e', "for (const p of [80, 8080]) require('net').createServer((s) => s.end()).listen(p)"], { stdio: 'ignore' }));
      enforcer.setPod(`ns1/${p}`, view(p), new Map([[NETWORK, [ip(p)]]]));
    }
    await waitFor(() => connects('a', 'b', 80) && connects('c', 'b', 8080) && connects('b', 'a', 80), 20_000, () => 'the test pods do not reach each other on the bridge without policy');
  });

  after(() => {
    enforcer.stop();
    for (const s of servers) s.kill('SIGKILL');
    for (const p of ['a', 'b', 'c'] as Name[]) trySh('ip', ['netns', 'del', netns(p)]);
    trySh('ip', ['netns', 'del', node]);
  });

  it("a pod's policies are in its netns when its attach admits it, before its interface is used; changes follow; other pods are not judged", async () => {
    enforcer.setModel(model(mnp('from-client', 'brnet', { podSelector: { matchLabels: { app: 'server' } }, ingress: [{ from: [{ podSelector: { matchLabels: { app: 'client' } } }], ports: [{ port: 'http' }] }] })));
    for (const p of ['a', 'b', 'c'] as Name[]) await enforcer.admit(rec(p), view(p));
    assert.deepEqual(reach([['a', 'b', 8080], ['a', 'b', 80], ['c', 'b', 8080], ['b', 'a', 80], ['c', 'a', 80]]), { 'a->b:8080': true, 'a->b:80': false, 'c->b:8080': false, 'b->a:80': true, 'c->a:80': true });
    assert.match(sh('ip', ['netns', 'exec', netns('b'), 'nft', 'list', 'table', 'inet', 'kni-multi-policy']), /iifname "net1" jump in-0/);
    assert.equal(trySh('ip', ['netns', 'exec', netns('a'), 'nft', 'list', 'table', 'inet', 'kni-multi-policy']).ok, false, 'a pod no policy judges gets no table');
    assert.equal(trySh('ip', ['netns', 'exec', node, 'nft', 'list', 'table', 'inet', 'kni-multi-policy']).ok, false, 'nothing is written outside the pods');

    // Egress, by a namespace selector and an ipBlock less an exception: written again within the delay.
    enforcer.setModel(model(mnp('out', 'ns1/brnet', { podSelector: { matchLabels: { app: 'client' } }, policyTypes: ['Egress'], egress: [{ to: [{ ipBlock: { cidr: '192.168.77.0/24', except: [`${ip('c')}/32`] } }] }] })));
    await waitFor(() => !connects('a', 'c', 80), 10_000, () => 'the egress policy is not in force');
    assert.deepEqual(reach([['a', 'b', 80], ['a', 'c', 80], ['c', 'b', 80]]), { 'a->b:80': true, 'a->c:80': false, 'c->b:80': true });

    // A label change of a pod of this node: its chain follows.
    enforcer.updateLocal('ns1', 'a', { labels: { app: 'moved' }, ports: [] });
    await waitFor(() => connects('a', 'c', 80), 10_000, () => 'the pod that left the policy is still judged by it');

    // The policy gone: the tables go.
    enforcer.setModel(model());
    await waitFor(() => !trySh('ip', ['netns', 'exec', netns('b'), 'nft', 'list', 'table', 'inet', 'kni-multi-policy']).ok, 10_000, () => 'the table stayed with no policy');
  });
});
