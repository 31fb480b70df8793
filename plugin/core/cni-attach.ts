// Attaching a sandbox through the CNI network of defaultNetwork.cni instead of kni's built-in
// network. The core keeps what it keeps for every sandbox — the lock, the record written
// before any kernel work and the commit mark after it, rollback, release, reconcile, GC,
// metrics and spans — and the plugins do the wiring and the IPAM.
import { KniError } from './errors';
import type { NetworkRuntime } from './network-runtime';
import { ATTACHED } from './runtime-types';
import { CniRuntime } from '../cni/cni-network';
import { CniPluginError } from '../cni/plugin-exec';
import { formatIp } from '../ipam/ip';
import { AllocatedAddress } from '../ipam/ipam';
import type { PortMapping } from '../node/host-ports';
import { withSpan } from '../observe/tracing';
import type { Bandwidth } from '../pod/bandwidth';
import { InterfaceRecord, SandboxRecord } from '../store/records';

export interface CniRequest {
  ips: { family: 4 | 6; value: bigint }[];
  mac?: string;
  ports: PortMapping[];
  bandwidth?: Bandwidth;
}

/** What the plugins get for a sandbox: CNI_ARGS as runtimes set them, and the capability args. */
export function cniRuntimeOf(rec: SandboxRecord, ifName: string, req?: CniRequest): CniRuntime {
  const args = ['IgnoreUnknown=1', `K8S_POD_NAMESPACE=${rec.pod.namespace}`, `K8S_POD_NAME=${rec.pod.name}`, `K8S_POD_INFRA_CONTAINER_ID=${rec.id}`, `K8S_POD_UID=${rec.pod.uid}`].join(';');
  const capabilityArgs: Record<string, unknown> = { 'io.kubernetes.cri.pod-annotations': rec.annotations };
  if (req?.ports.length) capabilityArgs.portMappings = req.ports.map((m) => ({ hostPort: m.hostPort, containerPort: m.containerPort, protocol: m.protocol, ...(m.hostIp ? { hostIP: m.hostIp } : {}) }));
  if (req?.bandwidth) capabilityArgs.bandwidth = req.bandwidth;
  if (req?.ips.length) capabilityArgs.ips = req.ips.map((i) => formatIp(i.family, i.value));
  if (req?.mac) capabilityArgs.mac = req.mac;
  return { containerId: rec.id, netns: rec.netnsPath, ifName, args, capabilityArgs };
}

/** An attachment for DEL and CHECK: CNI_ARGS and capability args come from ADD's cache entry. */
export const cniAttachment = (rec: SandboxRecord): CniRuntime => ({ containerId: rec.id, netns: rec.netnsPath, ifName: rec.interfaces[0]?.name ?? 'eth0' });

/** The pod interface of a CNI result as kni records it. */
export function interfaceFromResult(result: unknown, ifName: string, network: string): InterfaceRecord {
  const r = (result ?? {}) as { interfaces?: { name?: string; mac?: string; sandbox?: string; mtu?: number }[]; ips?: { address?: string; gateway?: string; interface?: number }[] };
  const itfs = r.interfaces ?? [];
  const podIndex = itfs.findIndex((i) => i.sandbox && i.name === ifName);
  const pod = itfs[podIndex];
  const addresses: AllocatedAddress[] = (r.ips ?? [])
    .filter((ip) => typeof ip.address === 'string' && (ip.interface === undefined || ip.interface === podIndex))
    .map((ip) => {
      const [address, prefix] = ip.address!.split('/');
      return { family: address.includes(':') ? 6 : 4, address, prefixLength: Number(prefix), gateway: ip.gateway ?? '', range: `cni:${network}` };
    });
  return { name: ifName, hostVeth: '', mac: pod?.mac ?? '', mtu: pod?.mtu ?? 0, addresses };
}

const codeOf = (e: CniPluginError): KniError['code'] => (e.code === 11 || e.code === 50 ? 'UNAVAILABLE' : e.code === 4 || e.code === 7 ? 'INVALID_ARGUMENT' : 'INTERNAL');

export async function attachCni(rt: NetworkRuntime, rec: SandboxRecord, ifName: string, req: CniRequest, beforeCommit: (rec: SandboxRecord) => Promise<void>): Promise<SandboxRecord> {
  const cni = rt.cni!;
  // The record (no interface yet) is on disk before any plugin runs: a crash leaves it
  // "attaching", and the next start runs DEL through the chain for it.
  try {
    rt.store.sandboxes.put(rec.id, rec);
  } catch (e) {
    throw new KniError('UNAVAILABLE', `cannot record sandbox ${rec.id} in the state dir: ${(e as Error).message}`);
  }
  rt.sandboxes.set(rec.id, rec);
  let result: unknown;
  try {
    result = await withSpan('cni.add', { 'kni.cni.network': cni.name }, () => cni.add(cniRuntimeOf(rec, ifName, req)));
    rec.interfaces = [interfaceFromResult(result, ifName, cni.name)];
    rt.store.sandboxes.put(rec.id, rec);
    await beforeCommit(rec);
    rt.store.sandboxes.mark(rec.id, ATTACHED);
  } catch (e) {
    await rt.release(rec, false).catch(() => undefined);
    if (e instanceof KniError) throw e;
    if (e instanceof CniPluginError) throw new KniError(codeOf(e), `network ${cni.name}: ${e.message}`);
    throw new KniError('UNAVAILABLE', `sandbox ${rec.id}: ${(e as Error).message}`);
  }
  rec.phase = 'attached';
  return rec;
}
