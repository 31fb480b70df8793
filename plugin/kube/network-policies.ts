// Which NetworkPolicies select a pod, for Trace: kni enforces none, but a policy agent on the
// node may, and "a policy selects this pod" is where to look next when a path looks open. Only
// the pod selector is evaluated (which policies apply to the pod, and in which direction), not
// whether their rules allow a given peer: that is the policy agent's to say.
import type * as K8s from '@kubernetes/client-node';
import { log } from '../core/log';
import { apiError, KubeApi, withTimeout } from './kube-api';
import { labelSelectorMatches } from './label-selectors';

export interface PodPolicies {
  ingress: string[];
  egress: string[];
}

const TIMEOUT_MS = 5_000;

/**
 * One trace's reads of NetworkPolicies and pod labels: each namespace's policies and each pod
 * read once; after the first failure (no right to list them, the API away) it asks no more, so
 * a trace through many endpoints waits for one timeout at most.
 */
export class PolicyLookup {
  private readonly policies = new Map<string, Promise<K8s.V1NetworkPolicy[]>>();
  private failed = false;

  constructor(private readonly api: KubeApi) {}

  /** The policies selecting pod namespace/name, by direction; undefined when they cannot be read. */
  async selecting(namespace: string, name: string): Promise<PodPolicies | undefined> {
    if (this.failed) return undefined;
    try {
      const [pod, policies] = await Promise.all([
        withTimeout(this.api.core.readNamespacedPod({ namespace, name }), TIMEOUT_MS, `read pod ${namespace}/${name}`),
        this.inNamespace(namespace),
      ]);
      const labels = pod.metadata?.labels ?? {};
      const out: PodPolicies = { ingress: [], egress: [] };
      for (const p of policies) {
        if (!labelSelectorMatches(p.spec?.podSelector, labels)) continue;
        // No policyTypes: Ingress, and Egress too when the policy has egress rules (as the API defaults it).
        const types = p.spec?.policyTypes ?? ['Ingress', ...(p.spec?.egress ? ['Egress'] : [])];
        const named = `${namespace}/${p.metadata?.name ?? ''}`;
        if (types.includes('Ingress')) out.ingress.push(named);
        if (types.includes('Egress')) out.egress.push(named);
      }
      return out;
    } catch (e) {
      this.failed = true;
      log('debug', 'NetworkPolicies cannot be read for a trace', { pod: `${namespace}/${name}`, error: apiError(e) });
      return undefined;
    }
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
