// What network policy reads from the API server: every NetworkPolicy, ClusterNetworkPolicy and
// MultiNetworkPolicy, every Namespace's labels and every Pod's labels, addresses (on secondary
// networks too, from network-status) and named ports (a policy's peers are pods anywhere in the
// cluster), from five watches. The first full read of all five makes the models and writes the
// tables; until then the table the kernel holds is left alone and attaches wait
// (policy-enforcer.ts). A cluster without the ClusterNetworkPolicy or MultiNetworkPolicy CRD
// (the API server answers 404) has none: that read counts as done, and the watch keeps trying,
// so a CRD installed later is read then. A policy kni cannot enforce as written is said once per
// version: a log line and a Warning Event on the policy; what it cannot judge matches nothing.
import type * as K8s from '@kubernetes/client-node';
import type { PodPolicy } from '../core/builtin-backend';
import { KniError } from '../core/errors';
import { log } from '../core/log';
import { CLUSTER_POLICY_GROUP, CLUSTER_POLICY_PLURAL, CLUSTER_POLICY_VERSION, ClusterNetworkPolicy, compileClusterPolicies } from '../policy/cluster-policies';
import { clusterRules, compilePolicies, isolating, judge, LocalPod, PolicyPod, ruleText } from '../policy/policy-model';
import type { PolicyVerdicts } from '../core/trace-hop';
import { compileMultiPolicies, MULTI_POLICY_GROUP, MULTI_POLICY_PLURAL, MULTI_POLICY_VERSION, MultiNetworkPolicy, networkAddresses } from '../policy/multi-policies';
import { MultiPolicyEnforcer, networkInterfaces } from '../policy/multi-policy-enforcer';
import { PolicyEnforcer } from '../policy/policy-enforcer';
import { POLICY_TABLE, policyTableInKernel } from '../policy/policy-ruleset';
import type { InterfaceRecord, SandboxRecord } from '../store/records';
import { apiError, KubeApi, withTimeout } from './kube-api';
import { recordEvent } from './kube-events';
import { policyProblems } from '../observe/metrics';
import { containerPorts, peerIp } from './policy-verdict';
import { WatchRestart } from './watch-restart';

const POD_READ_MS = 5_000;
/** How often the table is written whole even when nothing changed (someone may have edited it). */
const REWRITE_MS = 5 * 60_000;

type Cached<T extends K8s.KubernetesObject> = K8s.Informer<T> & K8s.ObjectCache<T>;

/** A Pod's name, labels, addresses and named container ports. */
export const podView = (p: K8s.V1Pod): PolicyPod => ({
  namespace: p.metadata?.namespace ?? 'default',
  name: p.metadata?.name ?? '',
  labels: p.metadata?.labels ?? {},
  ips: (p.status?.podIPs ?? []).map((x) => x.ip).filter((x): x is string => !!x),
  ports: containerPorts(p),
});

/** A Pod as a peer of the policies; undefined for one that is none (host network, no address yet, finished). */
export function policyPod(p: K8s.V1Pod): PolicyPod | undefined {
  if (p.spec?.hostNetwork) return undefined;
  if (p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed') return undefined;
  const view = podView(p);
  return view.ips.length ? view : undefined;
}

/** The pod labels a runtime passes, without the ones the kubelet adds (io.kubernetes.pod.*). */
const podLabels = (labels: Record<string, string>): Record<string, string> => Object.fromEntries(Object.entries(labels).filter(([k]) => !k.startsWith('io.kubernetes.')));

/** GetPodPolicy's answer. */
export interface PodPolicyView {
  enforced: boolean;
  reason: string;
  hostEnd: string;
  policies: { name: string; direction: 'ingress' | 'egress'; allows: string[] }[];
  problems: string[];
}

/** What the policy watch reads of the runtime. */
export interface PolicyRuntimeParts {
  readonly sandboxes: ReadonlyMap<string, SandboxRecord>;
  readonly node: { warn(key: string, message: string | undefined): void };
  podPolicy?: PodPolicy;
}

export class PolicyWatch implements PodPolicy {
  readonly enforcer: PolicyEnforcer;
  readonly multi = new MultiPolicyEnforcer();
  private policies?: Cached<K8s.V1NetworkPolicy>;
  private clusterPolicies?: Cached<ClusterNetworkPolicy>;
  private multiPolicies?: Cached<MultiNetworkPolicy>;
  private namespaces?: Cached<K8s.V1Namespace>;
  private pods?: Cached<K8s.V1Pod>;
  private readonly restarts: WatchRestart[] = [];
  private readonly listed = new Set<string>();
  private reported = new Set<string>();
  private timers: NodeJS.Timeout[] = [];
  private compileTimer?: NodeJS.Timeout;

  constructor(private readonly rt: PolicyRuntimeParts, private readonly api: KubeApi, private readonly reconcileMs: number) {
    this.enforcer = new PolicyEnforcer((problem) => rt.node.warn('policy-table', problem));
  }

  start(): void {
    const { k8s, kc, core } = this.api;
    const net = kc.makeApiClient(k8s.NetworkingV1Api);
    const custom = kc.makeApiClient(k8s.CustomObjectsApi);
    const listClusterPolicies = () => custom.listClusterCustomObject({ group: CLUSTER_POLICY_GROUP, version: CLUSTER_POLICY_VERSION, plural: CLUSTER_POLICY_PLURAL, resourceVersion: '0' }) as Promise<K8s.KubernetesListObject<ClusterNetworkPolicy>>;
    // From the watch cache (resourceVersion "0"): every kni lists them.
    this.policies = k8s.makeInformer<K8s.V1NetworkPolicy>(kc, '/apis/networking.k8s.io/v1/networkpolicies', () => net.listNetworkPolicyForAllNamespaces({ resourceVersion: '0' }));
    this.namespaces = k8s.makeInformer<K8s.V1Namespace>(kc, '/api/v1/namespaces', () => core.listNamespace({ resourceVersion: '0' }));
    this.pods = k8s.makeInformer<K8s.V1Pod>(kc, '/api/v1/pods', () => core.listPodForAllNamespaces({ resourceVersion: '0' }));
    this.clusterPolicies = k8s.makeInformer<ClusterNetworkPolicy>(kc, `/apis/${CLUSTER_POLICY_GROUP}/${CLUSTER_POLICY_VERSION}/${CLUSTER_POLICY_PLURAL}`, listClusterPolicies);
    const listMultiPolicies = () => custom.listClusterCustomObject({ group: MULTI_POLICY_GROUP, version: MULTI_POLICY_VERSION, plural: MULTI_POLICY_PLURAL, resourceVersion: '0' }) as Promise<K8s.KubernetesListObject<MultiNetworkPolicy>>;
    this.multiPolicies = k8s.makeInformer<MultiNetworkPolicy>(kc, `/apis/${MULTI_POLICY_GROUP}/${MULTI_POLICY_VERSION}/${MULTI_POLICY_PLURAL}`, listMultiPolicies);
    for (const inf of [this.policies, this.namespaces, this.clusterPolicies, this.multiPolicies] as Cached<K8s.KubernetesObject>[]) {
      for (const verb of ['add', 'update', 'delete'] as const) inf.on(verb, () => this.recompile());
    }
    this.pods.on('add', (p) => this.pod(p));
    this.pods.on('update', (p) => this.pod(p));
    this.pods.on('delete', (p) => {
      this.enforcer.setPod(keyOf(p), undefined);
      this.multi.setPod(keyOf(p), undefined);
    });
    const watch = (inf: Cached<K8s.KubernetesObject>, resource: string, what: string, absent?: string) => {
      const r = new WatchRestart(inf, {
        resource,
        what,
        onConnected: () => this.connected(resource),
        // A resource the API server does not serve: none exist (and its watch keeps trying).
        ...(absent ? { describe: (e: string) => (e.includes('404') ? absent : `${what} broke; starting it again`), onBroke: (e: string) => (e.includes('404') && !this.listed.has(resource) ? this.connected(resource) : undefined) } : {}),
      });
      this.restarts.push(r);
      r.begin();
    };
    watch(this.policies as Cached<K8s.KubernetesObject>, 'networkpolicy', 'NetworkPolicy watch');
    watch(this.namespaces as Cached<K8s.KubernetesObject>, 'namespace', 'Namespace watch');
    watch(this.pods as Cached<K8s.KubernetesObject>, 'pods', 'Pod watch (network policy)');
    watch(this.clusterPolicies as Cached<K8s.KubernetesObject>, 'clusternetworkpolicy', 'ClusterNetworkPolicy watch', `ClusterNetworkPolicies are not served (their CRD, from sigs.k8s.io/network-policy-api v0.3.0, is not installed): none are enforced; retrying`);
    watch(this.multiPolicies as Cached<K8s.KubernetesObject>, 'multi-networkpolicy', 'MultiNetworkPolicy watch', `MultiNetworkPolicies are not served (their CRD, in kind-config/kni-daemonset.yaml, is not installed): none are enforced; retrying`);
    this.rt.podPolicy = this;
    this.timers.push(setInterval(() => this.checkTable(), this.reconcileMs).unref(), setInterval(() => {
      this.enforcer.writeNow();
      this.multi.writeAll(true);
    }, REWRITE_MS).unref());
  }

  stop(): void {
    for (const r of this.restarts) r.stop();
    for (const t of this.timers) clearInterval(t);
    if (this.compileTimer) clearTimeout(this.compileTimer);
    this.enforcer.stop();
    this.multi.stop();
    if (this.rt.podPolicy === this) this.rt.podPolicy = undefined;
  }

  /** Trace's verdicts from the model the table was written from (network-policies.ts reads the API instead when policy is off). */
  verdicts(): PolicyVerdicts {
    return {
      enforcedByKni: true,
      verdict: async (direction, pod, peer, port) => {
        const model = this.enforcer.currentModel;
        const own = this.pods?.get(pod.name, pod.namespace);
        if (!model || !own) return undefined;
        const other = peer.pod && this.pods?.get(peer.pod.name, peer.pod.namespace);
        return judge(model, direction, podView(own), { ip: peerIp(peer.ip), ...(other ? { pod: podView(other) } : {}) }, port);
      },
    };
  }

  /** The policies selecting a pod of this node and what each allows (GetPodPolicy). */
  podPolicy(rec: SandboxRecord): PodPolicyView {
    const itf = rec.interfaces.find((i) => !i.network && i.backend !== 'cni' && i.hostVeth);
    const model = this.enforcer.currentModel;
    if (!model) return { enforced: false, reason: "the cluster's NetworkPolicies have not been read yet", hostEnd: itf?.hostVeth ?? '', policies: [], problems: [] };
    if (!itf) return { enforced: false, reason: "the pod has no interface on kni's built-in network: its policies are its CNI network's", hostEnd: '', policies: [], problems: [] };
    const pod = this.enforcer.localPods().find((p) => p.end === itf.hostVeth) ?? { namespace: rec.pod.namespace, name: rec.pod.name, labels: podLabels(rec.labels), ips: [], ports: [] };
    const cluster = (d: 'ingress' | 'egress', tier: 'Admin' | 'Baseline') => {
      const byPolicy = new Map<string, string[]>();
      for (const { policy, rule } of clusterRules(model, pod, d, tier)) byPolicy.set(policy.name, [...(byPolicy.get(policy.name) ?? []), `${rule.action}${rule.name ? ` (${rule.name})` : ''}: ${ruleText(rule, d, pod.ports)}`]);
      return [...byPolicy].map(([name, allows]) => ({ name, direction: d, allows }));
    };
    // In the order they are judged; Baseline rules apply only where no NetworkPolicy isolates the pod.
    const policies = (['ingress', 'egress'] as const).flatMap((d) => {
      const own = isolating(model, pod, d).map((p) => ({ name: p.name, direction: d, allows: p[d]!.map((r) => ruleText(r, d, pod.ports)) }));
      return [...cluster(d, 'Admin'), ...own, ...(own.length ? [] : cluster(d, 'Baseline'))];
    });
    const names = new Set(policies.map((p) => p.name));
    const problems = model.problems.filter((x) => names.has(x.slice(0, x.indexOf(': '))));
    // The MultiNetworkPolicies judging its interfaces on secondary networks, after the default network's.
    const multi = this.multi.currentModel;
    for (const n of multi ? networkInterfaces(rec) : []) {
      const m = multi!.networks.get(n.network);
      if (!m) continue;
      const onNet = { ...pod, ips: n.ips };
      for (const d of ['ingress', 'egress'] as const) {
        for (const p of isolating(m, onNet, d)) policies.push({ name: `${p.name} (MultiNetworkPolicy for ${n.network}, on ${n.name})`, direction: d, allows: p[d]!.map((r) => ruleText(r, d, pod.ports)) });
      }
      problems.push(...m.problems.filter((x) => !problems.includes(x)));
    }
    return { enforced: true, reason: '', hostEnd: itf.hostVeth, policies, problems };
  }

  async admit(rec: SandboxRecord, itf: InterfaceRecord): Promise<void> {
    const pod = await this.localPod(rec, itf);
    await this.enforcer.admit(pod).catch((e: Error) => {
      throw new KniError('UNAVAILABLE', `network policy for pod ${rec.pod.namespace}/${rec.pod.name}: ${e.message}`);
    });
    // Its secondary interfaces are named on the record already, before any of them is wired.
    await this.multi.admit(rec, pod).catch(async (e: Error) => {
      await this.enforcer.release(itf.hostVeth).catch(() => undefined);
      throw new KniError('UNAVAILABLE', `MultiNetworkPolicy for pod ${rec.pod.namespace}/${rec.pod.name}: ${e.message}`);
    });
  }

  async release(rec: SandboxRecord, itf: InterfaceRecord): Promise<void> {
    this.multi.release(rec.id);
    await this.enforcer.release(itf.hostVeth);
  }

  /** The labels and named ports of a pod of this node: from the watch, the runtime's labels, or a read of the Pod. */
  private async localPod(rec: SandboxRecord, itf: InterfaceRecord): Promise<LocalPod> {
    const { namespace, name } = rec.pod;
    const base = { namespace: namespace || 'default', name, end: itf.hostVeth, ips: itf.addresses.map((a) => a.address) };
    let p = this.pods?.get(name, base.namespace);
    // Before the first read (the API away) the pod starts isolated anyway: no read to wait for.
    // Nor when no policy could select it by its labels: the watch brings them later, for a
    // policy made later. A read is an API request in the attach: with 1,000 Nodes joining it
    // took 100–400 ms, a busy API server's time, in each pod's start.
    if (!p && !Object.keys(podLabels(rec.labels)).length && this.enforcer.isReady && this.selectable(rec, base.namespace)) {
      p = await withTimeout(this.api.core.readNamespacedPod({ namespace: base.namespace, name }), POD_READ_MS, `read pod ${base.namespace}/${name}`).catch((e) => {
        // A pod no policy of its namespace can select is judged by none: it may start without its labels.
        if (!this.policies?.list(base.namespace).length) return undefined;
        throw new KniError('UNAVAILABLE', `pod ${base.namespace}/${name} cannot be read for its NetworkPolicies (${apiError(e)}); it cannot start before they are in place`);
      });
    }
    return p ? { ...base, labels: p.metadata?.labels ?? {}, ports: containerPorts(p) } : { ...base, labels: podLabels(rec.labels), ports: [] };
  }

  /** Whether a policy could select a pod of `namespace` (the sandbox `rec`) by its labels. */
  private selectable(rec: SandboxRecord, namespace: string): boolean {
    return !!(this.policies?.list(namespace).length || this.clusterPolicies?.list().length || (networkInterfaces(rec).length && this.multiPolicies?.list().length));
  }

  private pod(p: K8s.V1Pod): void {
    const view = policyPod(p);
    this.enforcer.setPod(keyOf(p), view);
    this.multi.setPod(keyOf(p), view, networkAddresses(p));
    // A pod of this node whose labels or ports changed: its own chains follow.
    const ns = p.metadata?.namespace ?? 'default';
    const change = { labels: p.metadata?.labels ?? {}, ports: containerPorts(p) };
    for (const l of this.enforcer.localPods()) {
      if (l.namespace === ns && l.name === p.metadata?.name) this.enforcer.updateLocal(l.end, change);
    }
    this.multi.updateLocal(ns, p.metadata?.name ?? '', change);
  }

  private connected(resource: string): void {
    const first = !this.enforcer.isReady;
    this.listed.add(resource);
    if (this.listed.size < 5) return;
    if (first) {
      // This node's pods as their records hold them, before the first write: it keeps their policies.
      this.enforcer.setLocal(this.recordedPods());
      for (const rec of this.rt.sandboxes.values()) {
        if (rec.phase === 'attached' && networkInterfaces(rec).length) void this.multi.admit(rec, this.recordedView(rec), false);
      }
      for (const p of this.pods?.list() ?? []) {
        this.enforcer.setPod(keyOf(p), policyPod(p));
        this.multi.setPod(keyOf(p), policyPod(p), networkAddresses(p));
      }
      log('info', 'network policy: NetworkPolicies, ClusterNetworkPolicies, MultiNetworkPolicies, Namespaces and Pods read; writing the tables', { policies: this.policies?.list().length ?? 0, clusterPolicies: this.clusterPolicies?.list().length ?? 0, multiPolicies: this.multiPolicies?.list().length ?? 0 });
    }
    this.compileNow();
  }

  /** A pod of this node as its record and the watch have it (addresses: each interface's own). */
  private recordedView(rec: SandboxRecord): PolicyPod {
    const p = this.pods?.get(rec.pod.name, rec.pod.namespace || 'default');
    return { namespace: rec.pod.namespace || 'default', name: rec.pod.name, ips: [], labels: p?.metadata?.labels ?? podLabels(rec.labels), ports: p ? containerPorts(p) : [] };
  }

  private recordedPods(): LocalPod[] {
    const out: LocalPod[] = [];
    for (const rec of this.rt.sandboxes.values()) {
      if (rec.phase !== 'attached') continue;
      for (const itf of rec.interfaces) {
        if (itf.network || itf.backend === 'cni' || !itf.hostVeth) continue;
        out.push({ ...this.recordedView(rec), end: itf.hostVeth, ips: itf.addresses.map((a) => a.address) });
      }
    }
    return out;
  }

  /** Changes of policies and namespaces that come together are compiled once. */
  private recompile(): void {
    if (!this.enforcer.isReady || this.compileTimer) return;
    this.compileTimer = setTimeout(() => this.compileNow(), 5);
  }

  private compileNow(): void {
    if (this.compileTimer) clearTimeout(this.compileTimer);
    this.compileTimer = undefined;
    const labels = new Map((this.namespaces?.list() ?? []).map((n) => [n.metadata?.name ?? '', n.metadata?.labels ?? {}]));
    const policies = [...(this.policies?.list() ?? [])];
    const clusterPolicies = [...(this.clusterPolicies?.list() ?? [])];
    const model = compilePolicies(policies, labels, compileClusterPolicies(clusterPolicies));
    this.enforcer.setModel(model);
    this.report([...policies, ...clusterPolicies], model.problems);
    policyProblems.set({ kind: 'NetworkPolicy' }, model.problems.filter((x) => x.slice(0, x.indexOf(': ')).includes('/')).length);
    policyProblems.set({ kind: 'ClusterNetworkPolicy' }, model.problems.filter((x) => !x.slice(0, x.indexOf(': ')).includes('/')).length);
    const multiPolicies = [...(this.multiPolicies?.list() ?? [])];
    const multi = compileMultiPolicies(multiPolicies, labels);
    this.multi.setModel(multi);
    this.report(multiPolicies, multi.problems, 'MultiNetworkPolicy');
    policyProblems.set({ kind: 'MultiNetworkPolicy' }, multi.problems.length);
  }

  /** Problems are "namespace/name: why" for a NetworkPolicy, "name: why" for a ClusterNetworkPolicy (cluster-scoped: no "/"). */
  private report(policies: readonly K8s.KubernetesObject[], problems: string[], namespacedKind: 'NetworkPolicy' | 'MultiNetworkPolicy' = 'NetworkPolicy'): void {
    for (const problem of problems) {
      const name = problem.slice(0, problem.indexOf(': '));
      const cluster = !name.includes('/');
      const [namespace, policyName] = cluster ? [undefined, name] : name.split('/');
      const p = policies.find((x) => x.metadata?.namespace === namespace && x.metadata?.name === policyName);
      const version = `${p?.metadata?.uid}/${p?.metadata?.resourceVersion}/${problem}`;
      if (this.reported.has(version)) continue;
      this.reported.add(version);
      const kind = cluster ? ('ClusterNetworkPolicy' as const) : namespacedKind;
      log('warn', `a ${kind} names something kni cannot enforce: it matches nothing`, { policy: name, problem });
      const apiVersion = cluster ? `${CLUSTER_POLICY_GROUP}/${CLUSTER_POLICY_VERSION}` : kind === 'MultiNetworkPolicy' ? `${MULTI_POLICY_GROUP}/${MULTI_POLICY_VERSION}` : 'networking.k8s.io/v1';
      const target = { kind, apiVersion, name: policyName, ...(cluster ? {} : { namespace }), uid: p?.metadata?.uid };
      void recordEvent(this.api, target, 'Warning', 'PolicyNotEnforced', problem.slice(name.length + 2));
    }
  }

  /** Reconcile: the table is put back when someone deleted it. */
  private checkTable(): void {
    if (!this.enforcer.isReady) return;
    try {
      if (policyTableInKernel()) return;
    } catch (e) {
      return void log('debug', 'cannot list nftables tables', { error: (e as Error).message });
    }
    log('warn', `the network policy table (inet ${POLICY_TABLE}) was deleted behind kni's back: written again`);
    this.enforcer.writeNow();
  }
}

const keyOf = (p: K8s.V1Pod): string => `${p.metadata?.namespace}/${p.metadata?.name}`;
