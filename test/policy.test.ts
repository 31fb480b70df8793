// Network policy's compiled form (plugin/policy/): what NetworkPolicies become, and what the
// kernel then does with real connections between routed pods: a node netns with three pod
// netns, the table written as kni writes it, TCP connections tried on the real kernel. The
// cluster's own specs run in test/cluster/k8s-e2e.cluster.ts and test/cluster/policy.cluster.ts.
import assert from 'node:assert/strict';
import { ChildProcess, spawn, spawnSync } from 'node:child_process';
import type * as K8s from '@kubernetes/client-node';
import { parseIp } from '../plugin/ipam/ip';
import { policyHops } from '../plugin/core/policy-hops';
import { parseTracedPort } from '../plugin/kube/policy-verdict';
import { ClusterNetworkPolicy, compileClusterPolicies } from '../plugin/policy/cluster-policies';
import { blockRanges, compilePolicies, judge, LocalPod, peerElements, PodChain, podChains, PolicyModel } from '../plugin/policy/policy-model';
import { podAddScript, podDeleteScript, podIsolatedScript, policyTableScript } from '../plugin/policy/policy-ruleset';
import { RUN, sh, trySh } from './helpers/sh';
import { waitFor } from './helpers/wait';

const np = (name: string, spec: K8s.V1NetworkPolicySpec, namespace = 'ns1'): K8s.V1NetworkPolicy => ({ metadata: { name, namespace }, spec });
const NAMESPACES = new Map([['ns1', { team: 'x' }], ['ns2', { team: 'y' }]]);
const model = (...ps: K8s.V1NetworkPolicy[]): PolicyModel => compilePolicies(ps, NAMESPACES);
/** The rules of a pod's one chain in a direction (undefined: no policy judges it there). */
const chainRules = (m: PolicyModel, pod: LocalPod, d: 'ingress' | 'egress'): string[] | undefined => {
  const chains: PodChain[] = podChains(m, pod, d, 'c');
  assert.ok(chains.length <= 1, 'one chain without a Pass');
  return chains[0]?.rules;
};

describe('network policy: NetworkPolicies compiled', () => {
  it('an ipBlock less its exceptions is the ranges between them', () => {
    assert.deepEqual(blockRanges('10.0.0.0/24', []).ranges, ['10.0.0.0/24']);
    assert.deepEqual(blockRanges('10.0.0.0/24', ['10.0.0.128/25']).ranges, ['10.0.0.0-10.0.0.127']);
    assert.deepEqual(blockRanges('10.0.0.0/24', ['10.0.0.4/32', '10.0.0.8/30']).ranges, ['10.0.0.0-10.0.0.3', '10.0.0.5-10.0.0.7', '10.0.0.12-10.0.0.255']);
    assert.deepEqual(blockRanges('10.0.0.0/24', ['10.0.0.0/16']).ranges, [], 'an exception holding the whole block leaves nothing');
    assert.deepEqual(blockRanges('fd00::/64', ['fd00::/65']).ranges, ['fd00::8000:0:0:0-fd00::ffff:ffff:ffff:ffff']);
  });

  const server: LocalPod = { namespace: 'ns1', name: 'server', end: 'kniserver', labels: { app: 'server' }, ips: ['10.1.0.2', 'fd00::2'], ports: [{ name: 'http', port: 8080, protocol: 'TCP' }] };

  it("a pod's chain: its own addresses, each allowing rule (named ports resolved against it), then a counted drop", () => {
    const m = model(np('allow', { podSelector: { matchLabels: { app: 'server' } }, ingress: [{ _from: [{ podSelector: { matchLabels: { app: 'client' } } }, { ipBlock: { cidr: '192.168.0.0/16', except: ['192.168.1.0/24'] } }], ports: [{ port: 'http' }, { port: 9000, endPort: 9010, protocol: 'UDP' }] }] }));
    const rules = chainRules(m, server, 'ingress')!;
    assert.deepEqual(rules.slice(0, 2), ['ip saddr { 10.1.0.2 } accept', 'ip6 saddr { fd00::2 } accept']);
    assert.ok(rules.includes('ip saddr @p0-i0-4 meta l4proto . th dport { udp . 9000-9010, tcp . 8080 } accept comment "ns1/allow"'), rules.join('\n'));
    assert.ok(rules.includes('ip saddr { 192.168.0.0-192.168.0.255, 192.168.2.0-192.168.255.255 } meta l4proto . th dport { udp . 9000-9010, tcp . 8080 } accept comment "ns1/allow"'), rules.join('\n'));
    assert.match(rules.at(-1)!, /^counter drop comment "ns1\/server: ingress isolated by 1 policy"$/);
    assert.equal(chainRules(m, server, 'egress'), undefined, 'an Ingress policy isolated egress');
    assert.equal(chainRules(m, { ...server, labels: { app: 'other' } }, 'ingress'), undefined, 'a pod the podSelector does not take is isolated');
  });

  it('a pod as a peer: in the sets of the rules whose pod and namespace selectors take it; egress named ports with its port numbers', () => {
    const m = model(
      np('a', { podSelector: {}, ingress: [{ _from: [{ namespaceSelector: { matchLabels: { team: 'y' } }, podSelector: { matchExpressions: [{ key: 'app', operator: 'In', values: ['client'] }] } }] }] }),
      np('b', { podSelector: {}, policyTypes: ['Egress'], egress: [{ ports: [{ port: 'http' }] }] }),
    );
    const client = (namespace: string) => ({ namespace, name: 'c', labels: { app: 'client' }, ips: ['10.1.0.9'], ports: [{ name: 'http', port: 8080, protocol: 'TCP' as const }] });
    assert.deepEqual(Object.fromEntries(peerElements(m, client('ns2'))), { 'p0-i0-4': ['10.1.0.9'], 'p1-e0-n4': ['10.1.0.9 . tcp . 8080'] });
    assert.deepEqual(Object.fromEntries(peerElements(m, client('ns1'))), { 'p1-e0-n4': ['10.1.0.9 . tcp . 8080'] }, 'a namespace the namespaceSelector does not take');
  });

  it('what kni cannot enforce is said, and allows nothing', () => {
    const m = model(np('bad', { podSelector: {}, ingress: [{ ports: [{ port: 80, protocol: 'ICMP' }] }, { _from: [{ ipBlock: { cidr: '10.0.0.0/33' } }] }] }));
    assert.equal(m.problems.length, 2, m.problems.join('\n'));
    assert.match(m.problems[0], /^ns1\/bad: protocol "ICMP" is not TCP, UDP or SCTP$/);
    const rules = chainRules(m, server, 'ingress')!;
    assert.equal(rules.filter((r) => r.includes('comment "ns1/bad"')).length, 0, rules.join('\n'));
  });
});

describe('NetworkPolicy verdicts from the compiled rules (knictl trace judges the policies on a path with them)', () => {
  const pol = (name: string, spec: object) => ({ metadata: { namespace: 'shop', name }, spec }) as any;
  const web = { app: 'web' };
  const labels = new Map<string, Record<string, string>>([['shop', { 'kubernetes.io/metadata.name': 'shop', team: 'a' }], ['other', { 'kubernetes.io/metadata.name': 'other' }]]);
  const peerPod = (namespace: string, ip: string) => ({ ip: parseIp(ip), pod: { namespace, name: 'c', labels: { app: 'client' }, ips: [ip], ports: [] } });
  const client = peerPod('shop', '10.1.0.7');
  const stranger = peerPod('other', '10.1.0.8');
  const outside = { ip: parseIp('192.0.2.9') };
  /** The verdict on the web pod (its labels, its named ports) of policies, compiled as for the kernel. */
  const policyVerdict = (policies: any[], direction: 'ingress' | 'egress', podLabels: Record<string, string>, peer: any, ports: any[], port?: any) =>
    judge(compilePolicies(policies, labels), direction, { namespace: 'shop', name: 'web', labels: podLabels, ips: ['10.1.0.2'], ports }, peer, port);
  const httpPort = [{ name: 'http', port: 8080, protocol: 'TCP' as const }];
  const tcp = (port: number) => ({ port, protocol: 'TCP' as const });
  it('isolates only in the directions of its types (Ingress by default, Egress too with egress rules); a pod no policy selects is not isolated', () => {
    const deny = pol('deny', { podSelector: {} });
    assert.deepEqual(policyVerdict([deny], 'ingress', web, client, []), { selecting: ['shop/deny'], allowedBy: [], ports: [] });
    assert.deepEqual(policyVerdict([deny], 'egress', web, client, []).selecting, []);
    assert.deepEqual(policyVerdict([pol('out', { podSelector: {}, egress: [{}] })], 'egress', web, client, []), { selecting: ['shop/out'], allowedBy: ['shop/out'], ports: 'all' });
    assert.deepEqual(policyVerdict([pol('db', { podSelector: { matchLabels: { app: 'db' } } })], 'ingress', web, client, []).selecting, []);
  });
  it('peers: a podSelector alone is of the policy\'s namespace, a namespaceSelector takes namespaces by label, both together both; an ipBlock holds the address minus its excepts', () => {
    const from = (...peers: object[]) => [pol('p', { podSelector: { matchLabels: web }, ingress: [{ from: peers }] })];
    // As @kubernetes/client-node reads it, `from` is `_from`: either is taken.
    const read = (...peers: object[]) => from(...peers).map((p) => ({ ...p, spec: { ...p.spec, ingress: [{ _from: p.spec.ingress[0].from }] } }));
    const allowed = (peers: object[], peer: any) => {
      const [asRead, asWritten] = [read(...peers), from(...peers)].map((p) => policyVerdict(p, 'ingress', web, peer, []).allowedBy.length === 1);
      assert.equal(asRead, asWritten);
      return asRead;
    };
    assert.equal(allowed([{ podSelector: { matchLabels: { app: 'client' } } }], client), true);
    assert.equal(allowed([{ podSelector: { matchLabels: { app: 'client' } } }], stranger), false, 'another namespace');
    assert.equal(allowed([{ namespaceSelector: { matchLabels: { team: 'a' } } }], client), true);
    assert.equal(allowed([{ namespaceSelector: {} }], stranger), true, 'every namespace');
    assert.equal(allowed([{ namespaceSelector: {}, podSelector: { matchLabels: { app: 'db' } } }], stranger), false);
    assert.equal(allowed([{ podSelector: {} }], outside), false, 'an address is no pod');
    assert.equal(allowed([{ ipBlock: { cidr: '10.1.0.0/16', except: ['10.1.0.8/32'] } }], client), true);
    assert.equal(allowed([{ ipBlock: { cidr: '10.1.0.0/16', except: ['10.1.0.8/32'] } }], stranger), false);
    assert.equal(allowed([{ ipBlock: { cidr: 'fd00::/8' } }], outside), false, 'another family');
    assert.equal(allowed([{ ipBlock: { cidr: '0.0.0.0/0' } }], outside), true);
    assert.equal(allowed([], stranger), true, 'an empty from: every source');
  });
  it('ports: a traced port is judged by protocol, number, range and name (the receiving pod\'s container port); without one the allowed ports are described', () => {
    const ports = (...p: object[]) => [pol('p', { podSelector: {}, ingress: [{ ports: p }] })];
    const judge = (p: object[], port?: any, named = httpPort) => policyVerdict(ports(...p), 'ingress', web, client, named, port);
    assert.deepEqual(judge([{ port: 80 }], tcp(80)).allowedBy, ['shop/p']);
    assert.deepEqual(judge([{ port: 80 }], tcp(81)).allowedBy, []);
    assert.deepEqual(judge([{ port: 80 }], { port: 80, protocol: 'UDP' }).allowedBy, [], 'TCP unless said');
    assert.deepEqual(judge([{ protocol: 'UDP' }], { port: 53, protocol: 'UDP' }).allowedBy, ['shop/p'], 'no port: every port of the protocol');
    assert.deepEqual(judge([{ port: 8000, endPort: 8100 }], tcp(8080)).allowedBy, ['shop/p']);
    assert.deepEqual(judge([{ port: 8000, endPort: 8100 }], tcp(8101)).allowedBy, []);
    assert.deepEqual(judge([{ port: 'http' }], tcp(8080)).allowedBy, ['shop/p']);
    assert.deepEqual(judge([{ port: 'http' }], tcp(8080), []).allowedBy, [], 'a name the pod does not have');
    assert.deepEqual(judge([{ port: 80 }, { port: 'http' }, { port: 'grpc' }, { protocol: 'UDP' }, { port: 9000, endPort: 9009 }]), { selecting: ['shop/p'], allowedBy: ['shop/p'], ports: ['80/TCP', 'every UDP port', '9000-9009/TCP', 'http (8080/TCP)'] });
    assert.deepEqual(judge([{ port: 'grpc' }]), { selecting: ['shop/p'], allowedBy: [], ports: [] }, 'only a name the pod lacks: nothing');
  });
  it('policies add up: any selecting policy\'s rule lets it through; each rule needs its peer and its port', () => {
    const a = pol('a', { podSelector: {}, ingress: [{ from: [{ podSelector: { matchLabels: { app: 'db' } } }], ports: [{ port: 80 }] }] });
    const b = pol('b', { podSelector: { matchLabels: web }, ingress: [{ from: [{ podSelector: {} }], ports: [{ port: 443 }] }] });
    const v = (port?: any) => policyVerdict([a, b], 'ingress', web, client, [], port);
    assert.deepEqual(v(tcp(80)), { selecting: ['shop/a', 'shop/b'], allowedBy: [], ports: [] }, 'a has the port but not the peer');
    assert.deepEqual(v(tcp(443)).allowedBy, ['shop/b']);
    assert.deepEqual(v().ports, ['443/TCP']);
  });
  it('a traced port is a number 1-65535, TCP unless /UDP or /SCTP is said', () => {
    assert.deepEqual(parseTracedPort('80'), { port: 80, protocol: 'TCP' });
    assert.deepEqual(parseTracedPort(' 53/udp'), { port: 53, protocol: 'UDP' });
    assert.deepEqual(parseTracedPort('9/SCTP'), { port: 9, protocol: 'SCTP' });
    for (const bad of ['0', '65536', 'http', '80/icmp', '80/', '']) assert.throws(() => parseTracedPort(bad), /want a port 1-65535/, bad);
  });
});

/** A pod netns on the test node: routed as kni's are (its address alone, the gateway through its veth). */
interface Pod {
  netns: string;
  end: string;
  ip: string;
}

const NS_LABELS = new Map([['ns1', { 'kubernetes.io/metadata.name': 'ns1', team: 'x' }], ['ns2', { 'kubernetes.io/metadata.name': 'ns2', team: 'y' }]]);
const cnp = (name: string, tier: string, priority: number, spec: object): ClusterNetworkPolicy => ({ metadata: { name }, spec: { tier, priority, subject: { namespaces: { matchLabels: { 'kubernetes.io/metadata.name': 'ns1' } } }, ...spec } });
/** NetworkPolicies and ClusterNetworkPolicies in one model, as the policy watch compiles them. */
const fullModel = (nps: K8s.V1NetworkPolicy[], cnps: ClusterNetworkPolicy[]): PolicyModel => compilePolicies(nps, NS_LABELS, compileClusterPolicies(cnps));
const fromNs = (ns: string) => ({ namespaces: { matchLabels: { 'kubernetes.io/metadata.name': ns } } });

describe('network policy: ClusterNetworkPolicies compiled (network-policy-api v0.3.0)', () => {
  const pod: LocalPod = { namespace: 'ns1', name: 'web', end: 'kniweb', labels: { app: 'web' }, ips: ['10.1.0.2'], ports: [{ name: 'http', port: 8080, protocol: 'TCP' }] };

  it('Admin rules by priority before the NetworkPolicies; a Pass goes to them in a chain of their own; Baseline only for a pod they do not isolate', () => {
    const m = fullModel([np('allow', { podSelector: {}, ingress: [{}] })], [
      cnp('second', 'Admin', 20, { ingress: [{ name: 'deny-ns2', action: 'Deny', from: [fromNs('ns2')] }] }),
      cnp('first', 'Admin', 10, { ingress: [{ name: 'pass-ns2-http', action: 'Pass', from: [fromNs('ns2')], protocols: [{ destinationNamedPort: 'http' }] }] }),
      cnp('base', 'Baseline', 5, { ingress: [{ name: 'deny-all', action: 'Deny', from: [{ namespaces: {} }] }] }),
    ]);
    const chains = podChains(m, pod, 'ingress', 'in-x');
    assert.deepEqual(chains.map((c) => c.name), ['in-x-t', 'in-x'], 'the chain a Pass goes to comes first');
    const [tail, head] = chains.map((c) => c.rules);
    assert.deepEqual(head, [
      'ip saddr { 10.1.0.2 } accept',
      'ip saddr @c1-i0-4 meta l4proto . th dport { tcp . 8080 } goto in-x-t comment "first (Admin) pass-ns2-http"',
      'ip6 saddr @c1-i0-6 meta l4proto . th dport { tcp . 8080 } goto in-x-t comment "first (Admin) pass-ns2-http"',
      'ip saddr @c2-i0-4 counter drop comment "second (Admin) deny-ns2"',
      'ip6 saddr @c2-i0-6 counter drop comment "second (Admin) deny-ns2"',
      'goto in-x-t',
    ]);
    assert.deepEqual(tail, ['accept comment "ns1/allow"', 'counter drop comment "ns1/web: ingress isolated by 1 policy"'], 'a pod a NetworkPolicy isolates: no Baseline rule');
    const bare = podChains(fullModel([], [cnp('base', 'Baseline', 5, { ingress: [{ name: 'deny-all', action: 'Deny', from: [{ namespaces: {} }] }] })]), pod, 'ingress', 'in-x');
    assert.deepEqual(bare, [{ name: 'in-x', rules: ['ip saddr { 10.1.0.2 } accept', 'ip saddr @c0-i0-4 counter drop comment "base (Baseline) deny-all"', 'ip6 saddr @c0-i0-6 counter drop comment "base (Baseline) deny-all"'] }]);
    assert.deepEqual(podChains(m, { ...pod, namespace: 'ns2' }, 'egress', 'out-x'), [], 'a pod no subject takes and no NetworkPolicy isolates has no chain');
  });

  it('peers: namespaces, pods in namespaces, networks; ports by number, range, protocol and name', () => {
    const m = fullModel([], [cnp('out', 'Admin', 1, { egress: [
      { name: 'pods', action: 'Accept', to: [{ pods: { namespaceSelector: { matchLabels: { team: 'y' } }, podSelector: { matchLabels: { app: 'db' } } } }], protocols: [{ tcp: { destinationPort: { number: 5432 } } }, { udp: { destinationPort: { range: { start: 5000, end: 5010 } } } }, { sctp: {} }] },
      { name: 'nets', action: 'Deny', to: [{ networks: ['192.0.2.0/24', 'fd00:1::/64'] }] },
      { name: 'named', action: 'Accept', to: [{ namespaces: {} }], protocols: [{ destinationNamedPort: 'http' }] },
    ] })]);
    const rules = podChains(m, pod, 'egress', 'o')[0].rules;
    assert.ok(rules.includes('ip daddr @c0-e0-4 meta l4proto . th dport { tcp . 5432, udp . 5000-5010, sctp . 0-65535 } accept comment "out (Admin) pods"'), rules.join('\n'));
    assert.ok(rules.includes('ip daddr { 192.0.2.0/24 } counter drop comment "out (Admin) nets"'), rules.join('\n'));
    assert.ok(rules.includes('ip6 daddr { fd00:1::/64 } counter drop comment "out (Admin) nets"'), rules.join('\n'));
    assert.ok(rules.includes('ip daddr . meta l4proto . th dport @c0-e2-n4 accept comment "out (Admin) named"'), rules.join('\n'));
    const db = { namespace: 'ns2', name: 'db', labels: { app: 'db' }, ips: ['10.1.0.9'], ports: [{ name: 'http', port: 8081, protocol: 'TCP' as const }] };
    assert.deepEqual(Object.fromEntries(peerElements(m, db)), { 'c0-e0-4': ['10.1.0.9'], 'c0-e2-4': ['10.1.0.9'], 'c0-e2-n4': ['10.1.0.9 . tcp . 8081'] });
  });

  it('what kni cannot enforce is said: a tier, a priority, an action, nodes and domainNames peers', () => {
    const { policies, problems } = compileClusterPolicies([
      cnp('tier', 'Middle', 1, {}),
      cnp('prio', 'Admin', 1001, {}),
      cnp('rules', 'Admin', 1, { egress: [{ name: 'r0', action: 'Allow', to: [fromNs('ns2')] }, { name: 'r1', action: 'Deny', to: [{ nodes: {} }, { domainNames: ['example.com'] }] }] }),
      { metadata: { name: 'nosubject' }, spec: { tier: 'Admin', priority: 1, subject: {} } },
    ]);
    assert.deepEqual(policies.map((p) => `${p.name}:${p.egress.map((r) => r.name)}`), ['rules:r1']);
    assert.deepEqual(problems, [
      'nosubject: the subject names no namespaces or pods: the policy is left out',
      'rules: egress rule "r0": action "Allow" is not Accept, Deny or Pass: the rule is left out',
      'rules: egress rule "r1": nodes peers are not enforced by kni: they match nothing',
      'rules: egress rule "r1": domainNames peers are not enforced by kni: they match nothing',
      'tier: tier "Middle" is not Admin or Baseline: the policy is left out',
      'prio: priority 1001 is not 0-1000: the policy is left out',
    ]);
  });

  it('verdicts: the first Admin rule that matches decides, a Pass leaves it to the NetworkPolicies, Baseline decides for a pod they do not isolate', () => {
    const from = (ns: string) => ({ ip: parseIp('10.1.0.7'), pod: { namespace: ns, name: 'c', labels: {}, ips: ['10.1.0.7'], ports: [] } });
    const tcp = (port: number) => ({ port, protocol: 'TCP' as const });
    const admin = cnp('admin', 'Admin', 1, { ingress: [{ name: 'pass-80', action: 'Pass', from: [fromNs('ns2')], protocols: [{ tcp: { destinationPort: { number: 80 } } }] }, { name: 'deny', action: 'Deny', from: [fromNs('ns2')] }] });
    const base = cnp('base', 'Baseline', 1, { ingress: [{ name: 'accept', action: 'Accept', from: [fromNs('ns1')] }, { name: 'deny', action: 'Deny', from: [{ namespaces: {} }] }] });
    const allow80 = np('allow', { podSelector: {}, ingress: [{ ports: [{ port: 80 }] }] });
    const judged = (nps: K8s.V1NetworkPolicy[], peerNs: string, port?: number) => judge(fullModel(nps, [admin, base]), 'ingress', pod, from(peerNs), port === undefined ? undefined : tcp(port));
    assert.deepEqual(judged([], 'ns2', 81).decidedBy, { policy: 'admin', tier: 'Admin', rule: 'deny', action: 'Deny' });
    assert.deepEqual(judged([allow80], 'ns2', 80), { selecting: ['ns1/allow'], allowedBy: ['ns1/allow'], ports: [] }, 'passed to the NetworkPolicy, which allows it');
    assert.deepEqual(judged([], 'ns2', 80).decidedBy, { policy: 'base', tier: 'Baseline', rule: 'deny', action: 'Deny' }, 'passed, no NetworkPolicy: Baseline');
    assert.deepEqual(judged([], 'ns1', 80).decidedBy, { policy: 'base', tier: 'Baseline', rule: 'accept', action: 'Accept' });
    assert.equal(judged([allow80], 'ns1', 81).decidedBy, undefined, 'a pod a NetworkPolicy isolates: Baseline says nothing');
    assert.equal(judged([], 'ns2').decidedBy?.rule, 'deny', 'without a port, the first rule for every port');
  });

  it("knictl trace's hops name the ClusterNetworkPolicy rule that decides, and a Deny is the problem", async () => {
    const m = fullModel([], [cnp('admin', 'Admin', 1, { ingress: [{ name: 'deny-ns2', action: 'Deny', from: [fromNs('ns2')] }] }), cnp('base', 'Baseline', 1, { ingress: [{ name: 'ns1', action: 'Accept', from: [fromNs('ns1')] }] })]);
    const pods: Record<string, { namespace: string; name: string; labels: Record<string, string>; ips: string[]; ports: never[] }> = {
      'ns1/web': { namespace: 'ns1', name: 'web', labels: {}, ips: ['10.1.0.2'], ports: [] },
      'ns2/c': { namespace: 'ns2', name: 'c', labels: {}, ips: ['10.1.0.7'], ports: [] },
      'ns1/c': { namespace: 'ns1', name: 'c', labels: {}, ips: ['10.1.0.8'], ports: [] },
    };
    const lookup = { enforcedByKni: true, verdict: async (d: 'ingress' | 'egress', pod: { namespace: string; name: string }, peer: { pod?: { namespace: string; name: string }; ip?: string }, port?: { port: number; protocol: 'TCP' }) =>
      judge(m, d, pods[`${pod.namespace}/${pod.name}`], { ip: peer.ip ? parseIp(peer.ip) : undefined, pod: peer.pod && pods[`${peer.pod.namespace}/${peer.pod.name}`] }, port) };
    const hops = async (from: string) => {
      const sender = pods[from];
      const r = await policyHops({ lookup, sender: { pod: sender, ip: sender.ips[0], node: false }, port: { port: 80, protocol: 'TCP' } }, { pod: pods['ns1/web'], ip: '10.1.0.2', ownNode: false }, 'node w1');
      return r.ingress.map((h) => `${h.what} | ${h.problem}`);
    };
    assert.deepEqual(await hops('ns2/c'), [`ClusterNetworkPolicy admin (Admin tier, rule "deny-ns2") denies what is sent from pod ns2/c on 80/TCP | kni's policy drops it`]);
    assert.deepEqual(await hops('ns1/c'), [`ClusterNetworkPolicy base (Baseline tier, rule "ns1") accepts what is sent from pod ns1/c on 80/TCP | `]);
  });
});

describe('network policy on the real kernel: connections between routed pods', function () {
  this.timeout(120_000);
  const node = `${RUN}-pn`;
  const pods: Record<string, Pod> = {};
  const servers: ChildProcess[] = [];
  const PORTS = [80, 8080, 9000];

  const ns = (n: string) => `/run/netns/${n}`;
  const nft = (script: string) => {
    const r = spawnSync('ip', ['netns', 'exec', node, 'nft', '-f', '-'], { input: script, encoding: 'utf8' });
    assert.equal(r.status, 0, `nft: ${r.stderr}\n${script}`);
  };
  const connects = (from: string, to: string, port: number): boolean => trySh('nsenter', [`--net=${ns(pods[from].netns)}`, 'timeout', '2', 'bash', '-c', `exec 3<>/dev/tcp/${pods[to].ip}/${port}`]).ok;
  const local = (name: string, labels: Record<string, string>): LocalPod => ({ namespace: 'ns1', name, end: pods[name].end, labels, ips: [pods[name].ip], ports: name === 'b' ? [{ name: 'http', port: 8080, protocol: 'TCP' }] : [] });
  const LABELS: Record<string, Record<string, string>> = { a: { app: 'client' }, b: { app: 'server' }, c: { app: 'other' } };
  const write = (m: PolicyModel) => nft(policyTableScript(m, Object.keys(pods).filter((p) => p !== 'd').map((p) => local(p, LABELS[p])), []));
  const reach = (pairs: [string, string, number][]) => Object.fromEntries(pairs.map(([f, t, p]) => [`${f}->${t}:${p}`, connects(f, t, p)]));

  before(async () => {
    sh('ip', ['netns', 'add', node]);
    sh('ip', ['netns', 'exec', node, 'sysctl', '-qw', 'net.ipv4.ip_forward=1']);
    sh('ip', ['-n', node, 'link', 'set', 'lo', 'up']);
    ['a', 'b', 'c', 'd'].forEach((name, i) => {
      const p: Pod = { netns: `${RUN}-p${name}`, end: `${RUN}v${name}`, ip: `10.99.0.${i + 2}` };
      pods[name] = p;
      sh('ip', ['netns', 'add', p.netns]);
      sh('ip', ['-n', node, 'link', 'add', p.end, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', p.netns]);
      sh('ip', ['-n', node, 'addr', 'add', '10.99.0.1/32', 'dev', p.end]);
      sh('ip', ['-n', node, 'link', 'set', p.end, 'up']);
      sh('ip', ['-n', node, 'route', 'add', `${p.ip}/32`, 'dev', p.end]);
      for (const args of [['link', 'set', 'lo', 'up'], ['link', 'set', 'eth0', 'up'], ['addr', 'add', `${p.ip}/32`, 'dev', 'eth0'], ['route', 'add', '10.99.0.1', 'dev', 'eth0'], ['route', 'add', 'default', 'via', '10.99.0.1']]) sh('ip', ['-n', p.netns, ...args]);
      const server = spawn('nsenter', [`--net=${ns(p.netns)}`, process.execPath, '-e', `for (const p of [${PORTS.join(',')}]) require('net').createServer((s) => s.end()).listen(p)`], { stdio: 'ignore' });
      servers.push(server);
    });
    await waitFor(() => connects('a', 'b', 80) && connects('b', 'c', 9000) && connects('c', 'd', 8080), 20_000, () => 'the test pods do not reach each other without policy');
  });

  after(() => {
    for (const s of servers) s.kill('SIGKILL');
    for (const p of Object.values(pods)) trySh('ip', ['netns', 'del', p.netns]);
    trySh('ip', ['netns', 'del', node]);
  });

  it('a default deny isolates the pods it selects, and only them; replies to their own connections come back', () => {
    write(model(np('deny', { podSelector: { matchLabels: { app: 'server' } }, policyTypes: ['Ingress'] })));
    assert.deepEqual(reach([['a', 'b', 80], ['c', 'b', 8080], ['b', 'a', 80], ['a', 'c', 80]]), { 'a->b:80': false, 'c->b:8080': false, 'b->a:80': true, 'a->c:80': true });
  });

  it('peers by pod selector on a named port, and by an ipBlock less an exception on a port range', () => {
    write(model(
      np('deny', { podSelector: {}, policyTypes: ['Ingress'] }),
      np('from-client', { podSelector: { matchLabels: { app: 'server' } }, ingress: [{ _from: [{ podSelector: { matchLabels: { app: 'client' } } }], ports: [{ port: 'http' }] }] }),
      np('from-block', { podSelector: { matchLabels: { app: 'server' } }, ingress: [{ _from: [{ ipBlock: { cidr: '10.99.0.0/24', except: ['10.99.0.4/32'] } }], ports: [{ port: 8999, endPort: 9001 }] }] }),
    ));
    assert.deepEqual(reach([['a', 'b', 8080], ['a', 'b', 80], ['c', 'b', 8080], ['a', 'b', 9000], ['c', 'b', 9000], ['b', 'a', 80]]), {
      'a->b:8080': true, 'a->b:80': false, 'c->b:8080': false, 'a->b:9000': true, 'c->b:9000': false, 'b->a:80': false,
    });
  });

  it("egress: only to the server's named port, by the peer's own port number", () => {
    write(model(np('out', { podSelector: { matchLabels: { app: 'client' } }, policyTypes: ['Egress'], egress: [{ to: [{ podSelector: { matchLabels: { app: 'server' } } }], ports: [{ port: 'http' }] }] })));
    // b's elements as a peer: what the cluster's pods bring to the table.
    assert.deepEqual(reach([['a', 'b', 8080], ['a', 'b', 80], ['a', 'c', 8080], ['c', 'a', 80]]), { 'a->b:8080': true, 'a->b:80': false, 'a->c:8080': false, 'c->a:80': true });
  });

  it("a new pod's chain and elements added into the table as it stands, and taken out again", () => {
    const m = model(np('deny', { podSelector: {}, policyTypes: ['Ingress'] }), np('from-new', { podSelector: { matchLabels: { app: 'server' } }, ingress: [{ _from: [{ podSelector: { matchLabels: { app: 'new' } } }] }] }));
    write(m);
    assert.deepEqual(reach([['d', 'b', 80], ['a', 'd', 80]]), { 'd->b:80': false, 'a->d:80': true }, 'd is in no table yet: not a peer the policies allow, and not isolated');
    const d = local('d', { app: 'new' });
    nft(podAddScript(m, d));
    assert.deepEqual(reach([['d', 'b', 80], ['a', 'd', 80]]), { 'd->b:80': true, 'a->d:80': false });
    nft(podDeleteScript(m, d));
    assert.deepEqual(reach([['a', 'd', 80], ['d', 'b', 80]]), { 'a->d:80': true, 'd->b:80': false });
    const table = sh('ip', ['netns', 'exec', node, 'nft', 'list', 'table', 'inet', 'kni-policy']);
    assert.doesNotMatch(table, new RegExp(`in-${d.end}|${d.ips[0]}`), table);
  });

  it('ClusterNetworkPolicies: an Admin Deny over a NetworkPolicy allow, a Pass to it, Baseline for the pods it does not isolate; added and taken out with a new pod', () => {
    const byName = (pod: string) => ({ pods: { namespaceSelector: {}, podSelector: { matchLabels: LABELS[pod] } } });
    const m = fullModel([np('allow-b', { podSelector: { matchLabels: { app: 'server' } }, ingress: [{ _from: [{ podSelector: {} }] }] })], [
      { metadata: { name: 'admin' }, spec: { tier: 'Admin', priority: 10, subject: byName('b'), ingress: [
        { name: 'pass-a', action: 'Pass', from: [byName('a')], protocols: [{ tcp: { destinationPort: { number: 80 } } }] },
        { name: 'deny-a', action: 'Deny', from: [byName('a')] },
      ] } },
      { metadata: { name: 'base' }, spec: { tier: 'Baseline', priority: 10, subject: { namespaces: {} }, ingress: [{ name: 'deny-c-9000', action: 'Deny', from: [byName('c')], protocols: [{ tcp: { destinationPort: { range: { start: 8999, end: 9001 } } } }] }] } },
    ]);
    write(m);
    assert.deepEqual(reach([['a', 'b', 80], ['a', 'b', 8080], ['c', 'b', 9000], ['c', 'a', 9000], ['c', 'a', 80], ['b', 'c', 9000]]), {
      'a->b:80': true, 'a->b:8080': false, 'c->b:9000': true, 'c->a:9000': false, 'c->a:80': true, 'b->c:9000': true,
    });
    const d = local('d', { app: 'new' });
    nft(podAddScript(m, d));
    assert.deepEqual(reach([['c', 'd', 9000], ['c', 'd', 80]]), { 'c->d:9000': false, 'c->d:80': true }, 'the new pod has its Baseline rule');
    nft(podDeleteScript(m, d));
    assert.equal(reach([['c', 'd', 9000]])['c->d:9000'], true);
  });

  it('a pod attached before the policies could be read starts isolated both ways, the table made if it is missing', () => {
    sh('ip', ['netns', 'exec', node, 'nft', 'delete', 'table', 'inet', 'kni-policy']);
    const d = local('d', { app: 'new' });
    nft(podIsolatedScript(d, true));
    nft(podIsolatedScript(d, false)); // again, into the table as it stands: the same
    assert.deepEqual(reach([['a', 'd', 80], ['d', 'b', 80], ['a', 'b', 80]]), { 'a->d:80': false, 'd->b:80': false, 'a->b:80': true });
    const table = sh('ip', ['netns', 'exec', node, 'nft', 'list', 'table', 'inet', 'kni-policy']);
    assert.equal(table.match(/ct state established,related accept/g)?.length, 2, table);
    sh('ip', ['netns', 'exec', node, 'nft', 'delete', 'table', 'inet', 'kni-policy']);
  });
});
