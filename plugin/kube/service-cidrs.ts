// The cluster's Service ranges (networking.k8s.io/v1 ServiceCIDR, Kubernetes 1.33 and later),
// read when a trace needs them: a packet to a ClusterIP is not routed as addressed, the node's
// service proxy (kube-proxy) rewrites it to an endpoint first.
import type * as K8s from '@kubernetes/client-node';
import { log } from '../core/log';
import { Cidr, cidrContains, Family, parseCidr } from '../ipam/ip';
import { apiError, KubeApi, withTimeout } from './kube-api';

/** A trace reads them at most this often: they change with the cluster's configuration only. */
const FRESH_MS = 30_000;

export class ServiceCidrs {
  /** cidrs undefined: they could not be listed. */
  private cached?: { at: number; cidrs?: { name: string; cidr: Cidr }[] };

  constructor(private readonly api: KubeApi) {}

  /** The ServiceCIDR holding the address, as "name cidr"; undefined when none does; null when they cannot be read. */
  async holding(family: Family, value: bigint): Promise<string | undefined | null> {
    const cidrs = await this.list();
    if (!cidrs) return null;
    const hit = cidrs.find((c) => c.cidr.family === family && cidrContains(c.cidr, family, value));
    return hit && `${hit.name} ${hit.cidr.text}`;
  }

  private async list(): Promise<{ name: string; cidr: Cidr }[] | undefined> {
    if (this.cached && Date.now() - this.cached.at < FRESH_MS) return this.cached.cidrs;
    const { k8s, kc } = this.api;
    let items: K8s.V1ServiceCIDR[];
    try {
      items = (await withTimeout(kc.makeApiClient(k8s.NetworkingV1Api).listServiceCIDR({ resourceVersion: '0' }), 5_000, 'list ServiceCIDRs')).items;
    } catch (e) {
      // Before Kubernetes 1.33, or without the right to list them: a trace says less, nothing fails.
      log('debug', 'ServiceCIDRs cannot be listed', { error: apiError(e) });
      this.cached = { at: Date.now() };
      return undefined;
    }
    const cidrs = items.flatMap((s) =>
      (s.spec?.cidrs ?? []).flatMap((t) => {
        try {
          return [{ name: s.metadata?.name ?? '', cidr: parseCidr(t) }];
        } catch {
          return [];
        }
      }),
    );
    this.cached = { at: Date.now(), cidrs };
    return cidrs;
  }
}
