// A network behind one interface: kni's built-in bridge network and CNI networks (the default
// network's conflist, NetworkAttachmentDefinitions) both wire one pod interface at a time. The
// core keeps what every sandbox needs whatever wires it: ids, the lock, the record written
// before any kernel work and its commit after it, rollback, release, reconcile, GC,
// metrics, spans and events.
import { familyOf } from '../ipam/ip';
import type { NetnsHandle } from '../netns/open-netns';
import type { PortMapping } from '../node/host-ports';
import type { Bandwidth } from '../pod/bandwidth';
import type { InterfaceRecord, SandboxRecord } from '../store/records';

/** What the caller asked for one interface. */
export interface AttachmentRequest {
  /** Requested addresses, one per family (the `ips` capability, CNI_ARGS IP=, a selection's ips). */
  ips: { family: 4 | 6; value: bigint; text?: string }[];
  mac?: string;
  ports: PortMapping[];
  bandwidth?: Bandwidth;
  /** A selection's cni-args, given to its plugins as args.cni. */
  cniArgs?: Record<string, unknown>;
  /** A selection's default-route gateways: the pod's default route goes through this interface. */
  defaultRoute?: string[];
  /**
   * The device for this network: one the kubelet gave the pod, with its resource
   * (plugin/core/device-assignment.ts), or one the pod's selection names (deviceID; resource '').
   */
  device?: { id: string; resource: string };
  /** A selection's InfiniBand GUID, given to the plugins as the infinibandGUID capability. */
  infinibandGuid?: string;
}

/**
 * How a detach treats the kernel objects: 'now' takes them out of the netns's way before
 * answering (a veth's pod end set down and renamed, or deleted: pod-end-vacate.ts); 'netns-ending'
 * (the caller is tearing the netns down: a runtime stopping the sandbox) may answer first and
 * delete them moments later; 'netns-goes' (kni unpins a netns it made) leaves them to the
 * netns's teardown.
 */
export type DetachMode = 'now' | 'netns-ending' | 'netns-goes';

export interface NetworkBackend {
  readonly kind: 'builtin' | 'cni';
  /** The network's name as network-status shows it. */
  readonly name: string;
  /**
   * Fills in what the record must hold before any kernel work (the built-in network's
   * addresses, reserved here); throws with nothing reserved.
   */
  reserve(rec: SandboxRecord, itf: InterfaceRecord, req: AttachmentRequest): void;
  /** Makes the interface in the netns open on ns; fills in what it learnt (a CNI result). */
  attach(rec: SandboxRecord, itf: InterfaceRecord, ns: NetnsHandle, req: AttachmentRequest): Promise<void>;
  /** Undoes attach (also a partial one, and after a restart). */
  detach(rec: SandboxRecord, itf: InterfaceRecord, mode: DetachMode): Promise<void>;
  /** What does not match between the interface and the kernel (CNI: the plugins' CHECK). */
  check(rec: SandboxRecord, itf: InterfaceRecord, ns: NetnsHandle): Promise<string[]>;
  /** Whether the network can take pods (CNI: STATUS); throws the reason when not. */
  status(): Promise<void>;
  /** Drops what the network still holds for attachments not in `valid`; returns the containers it released. */
  gc(valid: { containerId: string; ifName: string }[]): Promise<string[]>;
}

export const isBuiltIn = (itf: InterfaceRecord): boolean => (itf.backend ?? 'builtin') === 'builtin';
export const isDefaultNetwork = (itf: InterfaceRecord): boolean => !itf.network;
/** The definition an interface was made from ("namespace/name"): a selection's, or the pod's chosen default network; '' for the node's default network. */
export const definitionOf = (itf: InterfaceRecord): string => itf.network || itf.defaultNetwork || '';
/** The default network's interface has the default route unless a selection's default-route took it. */
export const carriesDefaultRoute = (itf: InterfaceRecord): boolean => itf.defaultRoute ?? !itf.network;

/**
 * The gateways of the pod's default routes through itf, one per family: a selection's
 * default-route where one took them (it replaces only the families it names: the default
 * network's interface keeps the others), else the default network's addresses' gateways.
 */
export function defaultGateways(rec: SandboxRecord, itf: InterfaceRecord): string[] {
  if (itf.defaultGateways) return itf.defaultGateways;
  // A secondary carries one only through a selection; records from before the gateways were kept name no families.
  if (!carriesDefaultRoute(itf) && (!isDefaultNetwork(itf) || rec.interfaces.some((o) => o.defaultRoute && !o.defaultGateways))) return [];
  const taken = new Set(rec.interfaces.flatMap((o) => o.defaultGateways ?? []).map(familyOf));
  return itf.addresses.filter((a) => a.gateway && !taken.has(a.family)).map((a) => a.gateway);
}
