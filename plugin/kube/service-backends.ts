// The Service behind a ClusterIP or a NodePort and the endpoints the node's service proxy
// rewrites it to, read when a trace needs them: the IPAddress object named by the ClusterIP
// (networking.k8s.io/v1, Kubernetes 1.33 and later, as are ServiceCIDRs) names its Service; a
// NodePort is found in the list of Services (from the API server's cache); the EndpointSlices
// labelled with the Service's name hold its endpoints. A few reads a trace, nothing watched: a
// trace is asked by a person, and every other moment kni needs no Service at all.
import type * as K8s from '@kubernetes/client-node';
import type { Family } from '../ipam/ip';
import { apiError, isNotFound, KubeApi, withTimeout } from './kube-api';

export interface ServiceEndpoint {
  address: string;
  /** As kube-proxy reads the conditions: ready unless said otherwise; serving as ready unless said; terminating only when said. */
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  /** The node it runs on, and "namespace/name" of its pod; '' when the slice does not say. */
  node: string;
  pod: string;
  /** Its slice's ports: a Service port's number on this endpoint is the one of the same name. */
  ports: EndpointPort[];
}

export interface EndpointPort {
  name: string;
  port: number;
  protocol: string;
}

export interface ServicePort extends EndpointPort {
  /** The port every node takes it on (type NodePort or LoadBalancer); 0 without. */
  nodePort: number;
}

export interface ServiceBehind {
  namespace: string;
  name: string;
  /** "name 80/TCP, 53/UDP"; '' without ports. */
  ports: string;
  portList: ServicePort[];
  /** "app=web,tier=front"; '' when the Service has no selector (its EndpointSlices are someone else's to write). */
  selector: string;
  /** internalTrafficPolicy Local: kube-proxy sends what a node's pods send it to that node's endpoints only. */
  nodeLocal: boolean;
  /** externalTrafficPolicy Local: what reaches a node's NodePort from outside goes to that node's endpoints only. */
  externalLocal: boolean;
  endpoints: ServiceEndpoint[];
}

const TIMEOUT_MS = 5_000;

/**
 * The Service whose ClusterIP `ip` (canonical text, as IPAddress objects are named) is, with its
 * endpoints of that family; undefined when no Service has it. Throws, with the API's reason,
 * when it cannot be read (no right to, or a cluster older than 1.33).
 */
export async function serviceBehind(api: KubeApi, family: Family, ip: string): Promise<ServiceBehind | undefined> {
  const { k8s, kc, core } = api;
  let owner: K8s.V1ParentReference | undefined;
  try {
    owner = (await withTimeout(kc.makeApiClient(k8s.NetworkingV1Api).readIPAddress({ name: ip }), TIMEOUT_MS, `read IPAddress ${ip}`)).spec?.parentRef;
  } catch (e) {
    if (isNotFound(e)) return undefined;
    throw new Error(`IPAddress ${ip}: ${apiError(e)}`);
  }
  if (!owner || owner.resource !== 'services' || owner.group || !owner.namespace) return undefined;
  const { namespace, name } = owner;
  let svc: K8s.V1Service;
  try {
    svc = await withTimeout(core.readNamespacedService({ namespace, name }), TIMEOUT_MS, `read Service ${namespace}/${name}`);
  } catch (e) {
    if (isNotFound(e)) return undefined;
    throw new Error(`Service ${namespace}/${name}: ${apiError(e)}`);
  }
  return described(api, family, svc);
}

/**
 * The Service taking `port` on every node (a NodePort, of type NodePort or LoadBalancer), with
 * its endpoints of that family; undefined when none does. Throws, with the API's reason, when the
 * Services cannot be listed.
 */
export async function serviceWithNodePort(api: KubeApi, family: Family, port: number, protocol: string): Promise<ServiceBehind | undefined> {
  let services: K8s.V1Service[];
  try {
    services = (await withTimeout(api.core.listServiceForAllNamespaces({ resourceVersion: '0' }), TIMEOUT_MS, 'list Services')).items;
  } catch (e) {
    throw new Error(`Services: ${apiError(e)}`);
  }
  const svc = services.find((s) => (s.spec?.ports ?? []).some((p) => p.nodePort === port && (p.protocol ?? 'TCP') === protocol));
  return svc ? described(api, family, svc) : undefined;
}

async function described(api: KubeApi, family: Family, svc: K8s.V1Service): Promise<ServiceBehind> {
  const { k8s, kc } = api;
  const namespace = svc.metadata?.namespace ?? '';
  const name = svc.metadata?.name ?? '';
  let slices: K8s.V1EndpointSlice[];
  try {
    const list = kc.makeApiClient(k8s.DiscoveryV1Api).listNamespacedEndpointSlice({ namespace, labelSelector: `kubernetes.io/service-name=${name}`, resourceVersion: '0' });
    slices = (await withTimeout(list, TIMEOUT_MS, `list EndpointSlices of ${namespace}/${name}`)).items;
  } catch (e) {
    throw new Error(`EndpointSlices of Service ${namespace}/${name}: ${apiError(e)}`);
  }
  return {
    namespace,
    name,
    ports: (svc.spec?.ports ?? []).map((p) => `${p.name ? `${p.name} ` : ''}${p.port}/${p.protocol ?? 'TCP'}`).join(', '),
    portList: (svc.spec?.ports ?? []).map((p) => ({ name: p.name ?? '', port: p.port, protocol: p.protocol ?? 'TCP', nodePort: p.nodePort ?? 0 })),
    selector: Object.entries(svc.spec?.selector ?? {}).map(([k, v]) => `${k}=${v}`).join(','),
    nodeLocal: svc.spec?.internalTrafficPolicy === 'Local',
    externalLocal: svc.spec?.externalTrafficPolicy === 'Local',
    endpoints: endpointsOf(slices, family),
  };
}

/** Each address once (kube-proxy takes an endpoint's first address), of the slices of that family. */
function endpointsOf(slices: K8s.V1EndpointSlice[], family: Family): ServiceEndpoint[] {
  const seen = new Map<string, ServiceEndpoint>();
  for (const slice of slices) {
    if (slice.addressType !== `IPv${family}`) continue;
    for (const ep of slice.endpoints ?? []) {
      const address = ep.addresses?.[0];
      if (!address || seen.has(address)) continue;
      const c = ep.conditions ?? {};
      const ready = c.ready ?? true;
      const ref = ep.targetRef;
      seen.set(address, {
        address,
        ready,
        serving: c.serving ?? ready,
        terminating: c.terminating ?? false,
        node: ep.nodeName ?? '',
        pod: ref?.kind === 'Pod' && ref.name ? `${ref.namespace ?? slice.metadata?.namespace ?? ''}/${ref.name}` : '',
        ports: (slice.ports ?? []).filter((p) => p.port !== undefined).map((p) => ({ name: p.name ?? '', port: p.port!, protocol: p.protocol ?? 'TCP' })),
      });
    }
  }
  return [...seen.values()];
}
