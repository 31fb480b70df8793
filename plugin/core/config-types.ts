// The daemon configuration's shape (config.ts reads and checks the file; config-cluster.ts and
// config-runtimes.ts parse their parts of it).
import type { Cidr } from '../ipam/ip';

export interface CniConfig {
  /** The socket kni-cni talks to. */
  socket: string;
  /** Where to write the conflist once the node network is ready ('' = do not write one). */
  confDir: string;
  confName: string;
  /** Where to install the kni-cni binary ('' = do not install it). */
  binDir: string;
}

export interface CriConfig {
  /** The runtime's CRI socket, to reconcile against its sandboxes ('' = off). */
  socket: string;
  /** How often to reconcile while running (a sandbox younger than this is never released by it). */
  reconcileSeconds: number;
}

export interface NriConfig {
  /** Connect to the runtime's NRI socket as an external plugin. */
  enabled: boolean;
  socket: string;
  pluginName: string;
  /** Two digits: NRI calls plugins in ascending index order. */
  pluginIndex: string;
  /** A sandbox attached more recently than this is never released by a Synchronize. */
  syncGraceSeconds: number;
}

export type SandboxKind = 'container' | 'vm';

/**
 * How other nodes' pods are reached: a route via the node (host-gw), an overlay (vxlan), per
 * peer (auto), or not by kni (none: a CNI default network whose plugins route themselves).
 */
export type Backend = 'auto' | 'host-gw' | 'vxlan' | 'none';

export interface KubernetesConfig {
  /** This node's Node name ('' = kni runs without Kubernetes). KNI_NODE_NAME fills it. */
  nodeName: string;
  /** '' = the in-cluster service account. */
  kubeconfig: string;
  /** "namespace/name" of kni's ConfigMap, watched for live changes ('' = not watched). */
  configMap: string;
  /** The ConfigMap key holding this file. */
  configKey: string;
}

/** Pod ranges for Nodes without spec.podCIDRs, handed out by kni itself (node-cidr-pool.ts). */
export interface NodeIpamConfig {
  /** The cluster's pod CIDRs, at most one per family ([] = off: the Nodes' podCIDRs come from node IPAM). */
  clusterCIDRs: Cidr[];
  /** The prefix length of each Node's block, as kube-controller-manager's --node-cidr-mask-size-ipv4/-ipv6. */
  nodeMaskSizeIPv4: number;
  nodeMaskSizeIPv6: number;
  /** "namespace/name" of the ConfigMap recording which Node holds which block. */
  configMap: string;
}

export interface DefaultNetworkConfig {
  /** A CNI conflist (or .conf) run for every pod instead of kni's built-in network ('' = built-in). */
  cni: string;
  /** Where its plugins (and every CNI network's) are looked up, in order. */
  binDirs: string[];
  /** The host's root as mounted in kni's container: plugins found under it run chrooted there ('' = none). */
  chrootDir: string;
  /** With cni: a file the default network's own agent writes when it can serve (Multus's readinessindicatorfile; '' = none). */
  readinessIndicatorFile: string;
}

export interface NetworksConfig {
  /** Network definitions as files (CNI configs named after the network; subdirectories name namespaces); '' = none. */
  dir: string;
  /** Watch NetworkAttachmentDefinitions on the API server (needs kubernetes.nodeName). */
  attachmentDefinitions: boolean;
  /** Write k8s.v1.cni.cncf.io/network-status on each Pod (needs kubernetes.nodeName). */
  podStatus: boolean;
  /**
   * Multus's namespaceIsolation: a pod's networks annotation may name definitions of its own
   * namespace, of `default`, and of globalNamespaces only.
   */
  namespaceIsolation: boolean;
  globalNamespaces: string[];
  /**
   * The kubelet's pod-resources API: which devices (device plugins) a pod was given, for the
   * definitions that take one (k8s.v1.cni.cncf.io/resourceName, as SR-IOV networks do).
   */
  podResourcesSocket: string;
  /** Where device plugins and kni keep device information files (the device-info spec's directory). */
  deviceInfoDir: string;
  /**
   * Networks every pod gets after its default network, before those its annotation asks for
   * (Multus's defaultNetworks): "name" (in kube-system) or "namespace/name[@interface]".
   */
  everyPod: string[];
  /** Namespaces whose pods do not get everyPod (Multus's systemNamespaces). */
  systemNamespaces: string[];
}

export interface VxlanConfig {
  vni: number;
  port: number;
  device: string;
  /**
   * Transmit checksum offload on the vxlan device: false turns it off (`ethtool -K <dev> tx
   * off`, flannel's answer to corrupted VXLAN checksums behind NAT), true on; "auto" turns it off
   * on kernels before 5.7 (whose checksum after kube-proxy's NAT was wrong, as Calico detects)
   * and otherwise leaves it as the kernel (or the node's admin) has it.
   */
  txChecksumOffload: boolean | 'auto';
}

/** kni's probe of each peer's pod network (plugin/node/peer-probe.ts); port 0 turns it off. */
export interface PeerProbeConfig {
  port: number;
  intervalSeconds: number;
  timeoutSeconds: number;
}

export type PodLink = 'auto' | 'bridge' | 'routed';
/** How a pod is wired: podLink with "auto" resolved. */
export type PodWiring = Exclude<PodLink, 'auto'>;

export interface Config {
  /** The network's name in QueryNodeNetworks. */
  name: string;
  bridge: string;
  /** Multicast snooping on the bridge (off: multicast floods to every pod, and attach time does not grow with the pods there). */
  bridgeMulticastSnooping: boolean;
  /**
   * How a pod's host veth joins the node: 'bridge' (a port of the bridge; pods share one L2
   * segment) or 'routed' (on no bridge; a /32 and /128 route to the pod through it, as Calico's
   * and the ptp plugin's are). The bridge keeps the gateway addresses either way. 'auto': routed,
   * unless the node already has pods on the bridge when kni starts.
   */
  podLink: PodLink;
  /** The pods' MTU; 0 ("auto"): that of the link holding the node's default route (node-mtu.ts). */
  mtu: number;
  ranges: Cidr[];
  /** True when ranges come from the Node's spec.podCIDRs (kubernetes.nodeName set, no ranges given). */
  rangesFromNode: boolean;
  /** '' = the --log-level flag; else applied at start and on a live ConfigMap change. */
  logLevel: string;
  kubernetes: KubernetesConfig;
  nodeIpam: NodeIpamConfig;
  backend: Backend;
  vxlan: VxlanConfig;
  peerProbe: PeerProbeConfig;
  defaultNetwork: DefaultNetworkConfig;
  /** Secondary networks (several per pod; plugins from defaultNetwork.binDirs). */
  networks: NetworksConfig;
  /** Extensions that must be registered and healthy before the node is ready for pods. */
  extensions: { required: string[]; ownerGraceSeconds: number };
  /** Where CreateNetwork pins the netns it makes. */
  netnsDir: string;
  /** How many netns CreateNetwork keeps made ahead (plugin/netns/netns-pool.ts); 0: none. */
  netnsPoolSize: number;
  /** Netns paths callers may hand us must resolve inside one of these (or be /proc/<pid>/ns/net). */
  allowedNetnsRoots: string[];
  /** One MASQUERADE rule per range for traffic leaving the pod ranges. */
  masquerade: boolean;
  /**
   * Destinations pod traffic reaches with the pod's own source address besides the cluster's
   * pod CIDRs (ip-masq-agent's nonMasqueradeCIDRs): a network that routes back to the pods.
   */
  nonMasqueradeCIDRs: Cidr[];
  /** FORWARD accepts what comes from or goes to the pod ranges (chain KNI-FWD, appended). */
  allowPodForwarding: boolean;
  /** A netns from CreateNetwork that no attach claims within this time is released by GC. */
  unclaimedNetnsGraceSeconds: number;
  /** How often reconcile and the unclaimed-netns sweep run while serving. */
  reconcileSeconds: number;
  /** What others delete (or set down) of kni's is repaired as the kernel announces it (false: at the periodic checks). */
  repairOnNotice: boolean;
  cni: CniConfig;
  cri: CriConfig;
  nri: NriConfig;
  /** Runtime handler (RuntimeClass handler) → sandbox kind. Unlisted handlers are containers. */
  runtimeHandlers: Record<string, SandboxKind>;
  /** For vm sandboxes, also create a tap joined to the veth (for VMMs other than Kata). */
  vmTap: boolean;
  /**
   * Packets from a pod must carry one of its own addresses (node-guards.ts). A pod annotated
   * kni.dev/source-check: "off" (a router pod) is not checked, in these namespaces only: an
   * annotation any pod owner could set would let any pod forge addresses again.
   */
  sourceCheck: { optOutNamespaces: string[] };
  /**
   * NetworkPolicy enforced by kni on its node (plugin/policy/) when it runs as a node agent
   * (kubernetes.nodeName set). Off for clusters that run their own policy agent.
   */
  policy: { enabled: boolean };
  /**
   * Host ports no pod may take, whether or not something listens there now (a port a node
   * process listens on is refused too): the kubelet's (10250, 10248 on loopback), kube-proxy's
   * (10249, 10256) and kni's metrics address in the DaemonSet (9273); the peer probe's port is
   * added by kni.
   */
  reservedHostPorts: number[];
}
