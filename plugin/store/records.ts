// What the state store holds: one record per sandbox kni wired, one per netns kni created.
import { AllocatedAddress } from '../ipam/ipam';
import type { PortMapping } from '../node/host-ports';
import type { Bandwidth } from '../pod/bandwidth';

export interface PodRef {
  name: string;
  namespace: string;
  uid: string;
}

export type SelectedBy = 'annotation' | 'api' | 'config';

/** DNS settings as a CNI result carries them (its `dns`): network-status reports them, as Multus does. */
export interface DnsSettings {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
}

export interface InterfaceRecord {
  name: string;
  hostVeth: string;
  mac: string;
  mtu: number;
  addresses: AllocatedAddress[];
  /** Wired routed (podLink "routed"): the host end is on no bridge and routes to the pod's addresses (/32, /128). */
  routed?: boolean;
  /** vm sandboxes with vmTap: the tap joined to this interface ('' otherwise). */
  tap?: string;
  /** Its network: absent or '' the default network, else a definition's "namespace/name". */
  network?: string;
  /** The default network's interface of a pod that chose its default network (v1.multus-cni.io/default-network): that definition's "namespace/name". */
  defaultNetwork?: string;
  /** The device the kubelet gave the pod for this interface (its definition's resourceName), handed to the plugins as deviceID. */
  deviceId?: string;
  /** That device's information file as the plugins left it (device-info in network-status). */
  deviceInfo?: Record<string, unknown>;
  /** Who wires it: kni's built-in network (absent) or a CNI network's plugins. */
  backend?: 'builtin' | 'cni';
  /** A CNI interface's network name (the conflist's): the key of its cached ADD result. */
  cniName?: string;
  /** A secondary interface asked for by the pod's networks annotation, through kni's API (AttachNetwork), or given to every pod (networks.everyPod). */
  selectedBy?: SelectedBy;
  /** The pod's default route goes through this interface (the default network's, unless a selection took it). */
  defaultRoute?: boolean;
  /** The gateways a selection's default-route put the pod's default routes through, here (absent in records before them). */
  defaultGateways?: string[];
  /** A CNI network's DNS settings, from its plugins' result (absent: none, or kni's built-in network). */
  dns?: DnsSettings;
  /** Its packets' source addresses are not checked (the pod's kni.dev/source-check: "off", where allowed). */
  sourceUnchecked?: boolean;
  /** Being added to (or removed from) an attached sandbox: a crash leaves it so, and the next start removes it. */
  adding?: boolean;
  removing?: boolean;
}

export interface SandboxRecord {
  id: string;
  /**
   * 'attaching' is written before the first kernel call, 'attached' once it is all done (the
   * commit), 'detaching' before the first kernel call of a detach. At start a record left
   * 'attaching' is rolled back and one left 'detaching' is finished.
   */
  phase: 'attaching' | 'attached' | 'detaching';
  pod: PodRef;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  runtimeHandler: string;
  /** 'vm' sandboxes (Kata, other VMMs) get the VM extra step; records before this field are containers. */
  kind?: 'container' | 'vm';
  /** The entry point that attached it (kni, cni, nri, containerd): CNI GC only judges its own. */
  entryPoint?: string;
  netnsPath: string;
  /** The netns's nsfs inode at attach: a path that later names another netns is never entered. */
  netnsInode?: number;
  /** The name of the kni-created netns this sandbox lives in, or ''. */
  ownedNetns: string;
  interfaces: InterfaceRecord[];
  /** Records written before interfaces named their backend: 'cni' meant every interface was the CNI default network's. */
  backend?: 'cni';
  /** Rate limits on the pod's first interface (absent: none). */
  bandwidth?: Bandwidth;
  /** Host ports DNATed to this pod (absent: none). */
  portMappings?: PortMapping[];
  /** The pod's cgroup parent as its runtime gave it: CNI plugins that declare cgroupPath get it. */
  cgroupParent?: string;
  createdAt: string;
}

export interface NetnsRecord {
  name: string;
  path: string;
  pod: PodRef;
  /** The sandbox that attached in this netns, or ''. */
  sandboxId: string;
  createdAt: string;
}
