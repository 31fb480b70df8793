// What the state store holds: one record per sandbox kni wired, one per netns kni created.
import { AllocatedAddress } from '../ipam/ipam';
import type { PortMapping } from '../node/host-ports';
import type { Bandwidth } from '../pod/bandwidth';

export interface PodRef {
  name: string;
  namespace: string;
  uid: string;
}

export interface InterfaceRecord {
  name: string;
  hostVeth: string;
  mac: string;
  mtu: number;
  addresses: AllocatedAddress[];
  /** vm sandboxes with vmTap: the tap joined to this interface ('' otherwise). */
  tap?: string;
}

export interface SandboxRecord {
  id: string;
  /**
   * 'attaching' is written before the first kernel call; a record left so is rolled back. On
   * disk the phase stays 'attaching': the store's marks (attached, detaching) say the rest.
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
  /** 'cni': attached by the CNI network of defaultNetwork.cni (absent: kni's built-in network). */
  backend?: 'cni';
  /** Rate limits on the pod's first interface (absent: none). */
  bandwidth?: Bandwidth;
  /** Host ports DNATed to this pod (absent: none). */
  portMappings?: PortMapping[];
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
