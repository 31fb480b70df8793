// Whether kni is leaving its node as its pod stops (the DaemonSet's preStop asks): only then
// do the conflist and kni-cni go. A rolling update, `kubectl rollout restart` or a deleted kni
// pod is followed at once by a new kni pod on the node; taking the conflist away meanwhile made
// the runtime report the network not ready and the kubelet set the node NotReady for that
// moment (Cilium's `cni.uninstall` defaults to false since 1.14 for the same reason; flannel and
// Calico never remove theirs). Unsure (API away), the files stay: kni-cni holds calls for a
// restarting kni (kni-cni.c), and one that never comes back fails a pod's sandbox with
// "kni-runtime is not reachable", which the kubelet retries.
import type * as K8s from '@kubernetes/client-node';
import { apiError, KubeApi, withTimeout } from './kube-api';
import { labelValue, requirementHolds } from './label-selectors';

export interface Leaving {
  leaving: boolean;
  /** Why, for the log line and the Pod's Event. */
  reason: string;
  /** kni's pod as the API had it (for its Event). */
  podUid?: string;
}

/**
 * The decision from what the API holds: the stopping pod (undefined: gone) and the DaemonSet
 * its controller reference names (undefined: gone; 'none': the pod names no DaemonSet).
 */
export function leavingFrom(pod: K8s.V1Pod | undefined, owner: K8s.V1DaemonSet | undefined | 'none', node?: K8s.V1Node): Leaving {
  // Graceful deletion keeps the object until the kubelet is done with it, this preStop included:
  // gone already, it was force-deleted (a stuck pod), and its DaemonSet, if any, starts another.
  if (!pod) return { leaving: false, reason: 'kni\'s pod is gone from the API (force-deleted): a DaemonSet that still exists starts another' };
  const ref = daemonSetRef(pod);
  if (!ref || owner === 'none') return { leaving: true, reason: 'kni\'s pod belongs to no DaemonSet: nothing starts it again' };
  if (!owner) return { leaving: true, reason: `its DaemonSet ${ref.name} is deleted` };
  if (owner.metadata?.uid !== ref.uid) return { leaving: true, reason: `its DaemonSet ${ref.name} was deleted (one of that name made since has its own pods write the conflist)` };
  if (owner.metadata?.deletionTimestamp) return { leaving: true, reason: `its DaemonSet ${ref.name} is being deleted` };
  // The DaemonSet controller deletes the pods of the nodes it no longer selects: none follows.
  if (node && !selectsNode(owner.spec?.template?.spec, node)) return { leaving: true, reason: `its DaemonSet ${ref.name} no longer selects node ${node.metadata?.name} (nodeSelector, node affinity)` };
  return { leaving: false, reason: `its DaemonSet ${ref.name} stays: a new kni pod takes over on this node (rolling update, restart or a deleted pod)` };
}

/** Whether a pod spec's nodeSelector and required node affinity admit the node (taints aside). */
export function selectsNode(spec: K8s.V1PodSpec | undefined, node: K8s.V1Node): boolean {
  const labels = node.metadata?.labels ?? {};
  if (Object.entries(spec?.nodeSelector ?? {}).some(([k, v]) => labels[k] !== v)) return false;
  const required = spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution;
  if (!required) return true;
  // The terms are ORed, a term's requirements ANDed; an empty term matches no node.
  return required.nodeSelectorTerms.some((t) => {
    const reqs = [...(t.matchExpressions ?? []).map((r) => ({ r, value: labelValue(labels, r.key) })), ...(t.matchFields ?? []).map((r) => ({ r, value: r.key === 'metadata.name' ? node.metadata?.name : undefined }))];
    // An operator the API server would have refused is no reason to remove the files.
    return reqs.length > 0 && reqs.every(({ r, value }) => requirementHolds(r.operator, r.values ?? [], value) ?? true);
  });
}

const daemonSetRef = (pod: K8s.V1Pod) => pod.metadata?.ownerReferences?.find((r) => r.controller && r.kind === 'DaemonSet' && r.apiVersion.startsWith('apps/'));

class RightsGone extends Error {}

/**
 * Asks the API about the pod namespace/name (kni's own, from the downward API); throws when it
 * cannot tell. `kubectl delete -f` of kni's manifest deletes its ServiceAccount and RBAC beside
 * the DaemonSet, so by the time a pod's preStop runs its token may be refused (401) or its rights
 * gone (403): kni is being removed then too.
 */
export async function kniLeavingNode(api: KubeApi, namespace: string, name: string, timeoutMs: number): Promise<Leaving> {
  // One budget for the calls: the preStop and kni's shutdown share the pod's grace period.
  const deadline = Date.now() + timeoutMs;
  const ask = async <T>(what: string, call: () => Promise<T>): Promise<T | undefined> => {
    try {
      return await withTimeout(call(), Math.max(1, deadline - Date.now()), what);
    } catch (e) {
      const code = (e as { code?: number }).code;
      if (code === 404) return undefined;
      if (code === 401 || code === 403) throw new RightsGone(`${what}: ${apiError(e)}`);
      throw new Error(`${what}: ${apiError(e)}`);
    }
  };
  try {
    const pod = await ask(`get Pod ${namespace}/${name}`, () => api.core.readNamespacedPod({ namespace, name }));
    const ref = pod && daemonSetRef(pod);
    const podUid = pod?.metadata?.uid;
    if (!pod || !ref) return { ...leavingFrom(pod, 'none'), podUid };
    const apps = api.kc.makeApiClient(api.k8s.AppsV1Api);
    const owner = await ask(`get DaemonSet ${namespace}/${ref.name}`, () => apps.readNamespacedDaemonSet({ namespace, name: ref.name }));
    const stays = !leavingFrom(pod, owner).leaving;
    // Only then the node: does the DaemonSet still select it? (Unknown: it does.)
    const nodeName = pod.spec?.nodeName;
    const node = stays && nodeName ? await ask(`get Node ${nodeName}`, () => api.core.readNode({ name: nodeName })).catch(() => undefined) : undefined;
    return { ...leavingFrom(pod, owner, node), podUid };
  } catch (e) {
    if (e instanceof RightsGone) return { leaving: true, reason: `kni's service account or its rights are gone (${e.message})` };
    throw e;
  }
}
