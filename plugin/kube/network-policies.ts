// The NetworkPolicies on a traced path, read from the API server for Trace when kni's own policy
// is off (a policy agent beside kni may enforce them): compiled and judged as kni's policy
// compiles them for the kernel (plugin/policy/policy-model.ts), one evaluator. With kni's policy
// on, Trace asks the policy watch instead (policy-watch.ts): the model the table was written from.
import type * as K8s from '@kubernetes/client-node';
import { log } from '../core/log';
import type { PodName } from '../core/trace-destination';
import { compilePolicies, judge, JudgedPeer } from '../policy/policy-model';
import { apiError, KubeApi, withTimeout } from './kube-api';
import { Direction, ingressPeers, DirectionVerdict, peerIp, TracedPort } from './policy-verdict';
import { podView } from './policy-watch';

/** The other end of what a policy is asked about: a pod by name, and its address (a node or the outside: the address only). */
export interface PeerRef {
  pod?: PodName;
  ip?: string;
}

const TIMEOUT_MS = 5_000;

/**
 * One trace's reads of NetworkPolicies, pods and namespaces: each read once; after the first
 * failure (no right to read them, the API away) it asks no more, so a trace through many
 * endpoints waits for one timeout at most.
 */
export class PolicyLookup {
  private readonly policies = new Map<string, Promise<K8s.V1NetworkPolicy[]>>();
  private readonly pods = new Map<string, Promise<K8s.V1Pod>>();
  private readonly namespaces = new Map<string, Promise<Record<string, string>>>();
  private failed = false;
  /** Read from the API: kni's policy is off, so an agent beside kni may enforce them. */
  readonly enforcedByKni = false;

  constructor(private readonly api: KubeApi) {}

  /**
   * The verdict of the policies of `pod` in `direction` on what passes between it and `peer`
   * (on `port`, when one is traced); undefined when they cannot be read.
   */
  async verdict(direction: Direction, pod: PodName, peer: PeerRef, port?: TracedPort): Promise<DirectionVerdict | undefined> {
    if (this.failed) return undefined;
    try {
      const [own, policies] = await Promise.all([this.pod(pod), this.inNamespace(pod.namespace)]);
      const other = peer.pod ? await this.pod(peer.pod).catch(() => undefined) : undefined;
      const byNamespace = policies.some((p) => [...(p.spec?.ingress ?? []).flatMap((r) => ingressPeers(r) ?? []), ...(p.spec?.egress ?? []).flatMap((r) => r.to ?? [])].some((x) => x.namespaceSelector));
      const asPeer: JudgedPeer = { ip: peerIp(peer.ip) };
      const labels = new Map<string, Record<string, string>>();
      if (other && peer.pod) {
        if (byNamespace) labels.set(peer.pod.namespace, await this.namespaceLabels(peer.pod.namespace));
        asPeer.pod = podView(other);
      }
      return judge(compilePolicies(policies, labels), direction, podView(own), asPeer, port);
    } catch (e) {
      this.failed = true;
      log('debug', 'NetworkPolicies cannot be read for a trace', { pod: `${pod.namespace}/${pod.name}`, error: apiError(e) });
      return undefined;
    }
  }

  private pod({ namespace, name }: PodName): Promise<K8s.V1Pod> {
    const key = `${namespace}/${name}`;
    let p = this.pods.get(key);
    if (!p) {
      p = withTimeout(this.api.core.readNamespacedPod({ namespace, name }), TIMEOUT_MS, `read pod ${key}`);
      this.pods.set(key, p);
    }
    return p;
  }

  private namespaceLabels(name: string): Promise<Record<string, string>> {
    let p = this.namespaces.get(name);
    if (!p) {
      p = withTimeout(this.api.core.readNamespace({ name }), TIMEOUT_MS, `read namespace ${name}`).then((n) => n.metadata?.labels ?? {});
      this.namespaces.set(name, p);
    }
    return p;
  }

  private inNamespace(namespace: string): Promise<K8s.V1NetworkPolicy[]> {
    let p = this.policies.get(namespace);
    if (!p) {
      const list = this.api.kc.makeApiClient(this.api.k8s.NetworkingV1Api).listNamespacedNetworkPolicy({ namespace, resourceVersion: '0' });
      p = withTimeout(list, TIMEOUT_MS, `list NetworkPolicies in ${namespace}`).then((l) => l.items);
      this.policies.set(namespace, p);
    }
    return p;
  }
}
