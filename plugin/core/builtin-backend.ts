// kni's built-in network behind the backend interface: an address per pod range from kni's own
// IPAM (reserved and on disk before any kernel work), a veth on the node bridge, a tap for vm
// sandboxes and bandwidth shaping when asked. Spawn-free: all netlink from this process.
import { invalid, KniError } from './errors';
import type { Config, PodWiring } from './config';
import type { NodeLifecycle } from './node-lifecycle';
import { PlanParts, podAnnotation } from './network-plan';
import { CheckParts, checkRecord } from './sandbox-check';
import { unwireInterface, wireInterface, WiringParts } from './sandbox-wiring';
import type { Ipam } from '../ipam/ipam';
import type { VethBatchDelete } from '../pod/veth-batch-delete';
import type { AttachmentRequest, DetachMode, NetworkBackend } from './network-backend';
import { log } from './log';
import { hostVethName, SOURCE_CHECK_ANNOTATION } from './runtime-types';
import { assignTap } from './vm-tap';
import { bitsOf, parseIp } from '../ipam/ip';
import type { PortMapping } from '../node/host-ports';
import { nodeListens } from '../node/node-listeners';
import { NetnsHandle } from '../netns/open-netns';
import { withSpan } from '../observe/tracing';
import { guardedEnd } from '../node/node-guards';
import { podMac } from '../pod/pod-wiring';
import { InterfaceRecord, SandboxRecord } from '../store/records';

/**
 * Network policy for the pods of the default network (plugin/kube/policy-watch.ts): a pod's
 * policies are in the kernel before its veth exists, and go with it.
 */
export interface PodPolicy {
  admit(rec: SandboxRecord, itf: InterfaceRecord): Promise<void>;
  release(rec: SandboxRecord, itf: InterfaceRecord): Promise<void>;
}

/** What kni's built-in network uses of the runtime. */
export interface BuiltInParts extends WiringParts, CheckParts, Pick<PlanParts, 'podAnnotations'> {
  /** Set while kni enforces network policy (a node agent with policy.enabled). */
  readonly podPolicy?: PodPolicy;
  readonly cfg: Config;
  readonly sandboxes: ReadonlyMap<string, SandboxRecord>;
  readonly ipam: Ipam;
  readonly node: Pick<NodeLifecycle, 'bridgeIndex' | 'ensure' | 'mtu' | 'guards' | 'status'>;
  readonly podLink: PodWiring;
  readonly vethDelete: VethBatchDelete;
  ipamChanged(): void;
}

/**
 * Whether a pod's sources go unchecked: annotated "off", in a namespace the operator allows
 * that in (sourceCheck.optOutNamespaces). Elsewhere the annotation is refused, not ignored: the
 * pod's owner learns why at once instead of when the pod's forwarded packets vanish.
 */
function sourceCheckOff(rt: BuiltInParts, rec: SandboxRecord): boolean {
  const v = podAnnotation(rt, rec, SOURCE_CHECK_ANNOTATION);
  if (v === undefined || v === 'on') return false;
  if (v !== 'off') throw invalid(`annotation ${SOURCE_CHECK_ANNOTATION} ${JSON.stringify(v.slice(0, 64))} is not "on" or "off"`);
  const ns = rec.pod.namespace || 'default';
  const allowed = rt.cfg.sourceCheck.optOutNamespaces;
  if (!allowed.includes(ns)) throw invalid(`annotation ${SOURCE_CHECK_ANNOTATION}: "off" is honoured only in the namespaces kni's config lists in sourceCheck.optOutNamespaces (${allowed.join(', ') || 'none'}), not in ${ns}`);
  return true;
}

/**
 * Why a host port belongs to the node ('' when it does not): listed in reservedHostPorts (the
 * kubelet's, kube-proxy's and kni's own, whether or not they listen right now), or listened on
 * by a process in the node's network namespace now. Read from the kernel's socket tables, once
 * per pod that asks for host ports: DNAT would otherwise send the node's port to the pod, from
 * other hosts and from the node itself.
 */
function nodePortTaken(cfg: Config, m: PortMapping): string {
  const own = [...new Set([...cfg.reservedHostPorts, ...(cfg.peerProbe.port ? [cfg.peerProbe.port] : [])])];
  if (own.includes(m.hostPort)) return `port ${m.hostPort} is in reservedHostPorts (${cfg.reservedHostPorts.join(', ')}) or is kni's peer probe's`;
  const protocol = m.protocol.toUpperCase() as 'TCP' | 'UDP' | 'SCTP';
  const ip = m.hostIp ? parseIp(m.hostIp) : undefined;
  const listening = ip ? nodeListens(protocol, ip.family, m.hostPort, ip.value) : nodeListens(protocol, 4, m.hostPort) || nodeListens(protocol, 6, m.hostPort);
  return listening ? `a process of the node listens on ${m.protocol}/${m.hostPort}` : '';
}

export class BuiltInBackend implements NetworkBackend {
  readonly kind = 'builtin';

  constructor(private readonly rt: BuiltInParts) {}

  get name(): string {
    return this.rt.cfg.name;
  }

  reserve(rec: SandboxRecord, itf: InterfaceRecord, req: AttachmentRequest): void {
    for (const m of req.ports) {
      // Another pod's first: kni's own relay of that pod's port on [::1] listens there too.
      const holder = [...this.rt.sandboxes.values()].find((r) => r.portMappings?.some((o) => o.hostPort === m.hostPort && o.protocol === m.protocol && (!o.hostIp || !m.hostIp || o.hostIp === m.hostIp)));
      if (holder) throw new KniError('ALREADY_EXISTS', `host port ${m.protocol}/${m.hostPort} is already mapped to sandbox ${holder.id}`);
      const taken = nodePortTaken(this.rt.cfg, m);
      if (taken) throw new KniError('ALREADY_EXISTS', `host port ${m.protocol}/${m.hostPort}${m.hostIp ? ` on ${m.hostIp}` : ''} is the node's own: ${taken}; a pod mapped there would take the node's traffic`);
    }
    let addresses;
    try {
      addresses = withSpan('ipam.allocate', {}, () => this.rt.ipam.allocate(rec.id, req.ips));
    } finally {
      this.rt.ipamChanged();
    }
    itf.hostVeth = hostVethName(rec.id, itf.name);
    itf.mac = req.mac ?? podMac(addresses.find((a) => a.family === 4)?.address);
    itf.mtu = this.rt.node.mtu;
    if (this.rt.podLink === 'routed') {
      // The pod holds each address alone: everything else, its own range included, is through the gateway.
      itf.routed = true;
      itf.addresses = addresses.map((a) => ({ ...a, prefixLength: bitsOf(a.family) }));
    } else itf.addresses = addresses;
    // The one extra step for VM sandboxes; without vmTap the netns is left as Kata scans it.
    assignTap(this.rt.cfg.vmTap, rec, itf);
    if (sourceCheckOff(this.rt, rec)) itf.sourceUnchecked = true;
  }

  async attach(rec: SandboxRecord, itf: InterfaceRecord, ns: NetnsHandle): Promise<void> {
    // Before the veth exists: no packet reaches or leaves the pod ahead of its policies.
    const policy = itf.network ? undefined : this.rt.podPolicy;
    if (policy) await withSpan('policy.admit', {}, () => policy.admit(rec, itf));
    try {
      await wireInterface(this.rt, rec, itf, ns);
    } catch (e) {
      await policy?.release(rec, itf).catch(() => undefined);
      throw e;
    }
    // Before the answer, so before any of the pod's containers runs; a failure undoes the attach.
    if (!itf.sourceUnchecked) withSpan('source.check', {}, () => this.rt.node.guards.add(guardedEnd(itf)));
  }

  async detach(rec: SandboxRecord, itf: InterfaceRecord, mode: DetachMode): Promise<void> {
    if (!itf.network && itf.hostVeth && this.rt.podPolicy) {
      await this.rt.podPolicy.release(rec, itf).catch((e) => log('warn', "cannot take a pod out of the network policy table; it is written whole next", { sandbox: rec.id, error: (e as Error).message }));
    }
    if (!itf.sourceUnchecked && itf.hostVeth) {
      try {
        this.rt.node.guards.remove(guardedEnd(itf));
      } catch (e) {
        log('warn', "cannot take a pod's end out of the source check; reconcile rewrites kni's tables", { sandbox: rec.id, veth: itf.hostVeth, error: (e as Error).message });
      }
    }
    await unwireInterface(rec, itf, mode, this.rt);
  }

  async check(rec: SandboxRecord, itf: InterfaceRecord, ns: NetnsHandle): Promise<string[]> {
    return checkRecord(this.rt, rec, ns, [itf]);
  }

  async status(): Promise<void> {
    const s = this.rt.node.status();
    if (!s.ready) throw new KniError('UNAVAILABLE', s.reason);
  }

  /** The built-in network holds nothing outside the sandbox records (the core's GC releases those). */
  async gc(): Promise<string[]> {
    return [];
  }
}
