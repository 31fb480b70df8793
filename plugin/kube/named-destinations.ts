// Names and addresses of a trace's destination, read from the API when a trace asks: a
// destination given as kubectl names objects, service/NAMESPACE/NAME (a Service's ClusterIPs) or
// pod/NAMESPACE/NAME (a pod's IPs), and the other way round, the pod an address belongs to.
import type * as K8s from '@kubernetes/client-node';
import { KniError } from '../core/errors';
import { log } from '../core/log';
import { isSameIp, parseIp } from '../ipam/ip';
import { apiError, isNotFound, KubeApi, withTimeout } from './kube-api';

export type NamedKind = 'service' | 'pod';

const TIMEOUT_MS = 5_000;

/** The addresses a named Service or pod has, primary first; a precise error when it has none or cannot be read. */
export async function addressesOfNamed(api: KubeApi, kind: NamedKind, namespace: string, name: string): Promise<string[]> {
  const what = `${kind} ${namespace}/${name}`;
  const read = async <T>(p: Promise<T>): Promise<T> => {
    try {
      return await withTimeout(p, TIMEOUT_MS, `read ${what}`);
    } catch (e) {
      if (isNotFound(e)) throw new KniError('NOT_FOUND', `${what} does not exist`);
      throw new KniError('UNAVAILABLE', `${what} cannot be read: ${apiError(e)}`);
    }
  };
  if (kind === 'service') {
    const svc: K8s.V1Service = await read(api.core.readNamespacedService({ namespace, name }));
    if (svc.spec?.type === 'ExternalName') throw new KniError('FAILED_PRECONDITION', `${what} is an ExternalName Service (${svc.spec.externalName}): it has no ClusterIP, its name is a DNS alias`);
    const ips = (svc.spec?.clusterIPs ?? (svc.spec?.clusterIP ? [svc.spec.clusterIP] : [])).filter((ip) => ip && ip !== 'None');
    if (!ips.length) throw new KniError('FAILED_PRECONDITION', `${what} is headless (no ClusterIP): its name resolves to its pods' addresses, trace one of its pods`);
    return ips;
  }
  const pod: K8s.V1Pod = await read(api.core.readNamespacedPod({ namespace, name }));
  const ips = (pod.status?.podIPs ?? []).map((p) => p.ip).filter(Boolean);
  if (!ips.length) throw new KniError('FAILED_PRECONDITION', `${what} has no IP yet (phase ${pod.status?.phase ?? 'unknown'})`);
  return ips;
}

/**
 * The pod of the pod network holding an address now on a node (the other way round: a trace to
 * another node's pod names it); undefined when none does or the pods cannot be listed. By the
 * node's pods (the watch cache indexes them by node), not a `status.podIP` field selector: that
 * field holds a dual-stack pod's first address only. Host-network pods share their node's
 * address, and finished pods keep theirs in their status: neither is it.
 */
export async function podAtAddress(api: KubeApi, ip: string, node: string): Promise<{ namespace: string; name: string } | undefined> {
  try {
    const list = await withTimeout(api.core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${node}`, resourceVersion: '0' }), TIMEOUT_MS, `list the pods of node ${node}`);
    const want = parseIp(ip);
    const holds = (p: K8s.V1Pod) => (p.status?.podIPs ?? []).some((a) => isSameIp(a.ip, want));
    const pod = list.items.find((p) => !p.spec?.hostNetwork && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed' && holds(p));
    return pod?.metadata?.name ? { namespace: pod.metadata.namespace ?? '', name: pod.metadata.name } : undefined;
  } catch (e) {
    log('debug', 'the pod at an address cannot be listed for a trace', { ip, node, error: apiError(e) });
    return undefined;
  }
}
