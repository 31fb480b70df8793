// What the network runtime's callers and helpers share: requests and answers, the annotations
// that tell a sandbox's kind, the state store's marks, and the host veth naming.
import crypto from 'node:crypto';
import { PodRef } from '../store/records';
import { EntryPoint } from '../observe/metrics';
import type { PodWiring } from './config';

export interface AttachRequest {
  sandboxId: string;
  netnsPath: string;
  interfaceName?: string;
  pod?: Partial<PodRef>;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  runtimeHandler?: string;
  /** Addresses the caller asks for (CNI `ips` capability, CNI_ARGS IP=), IP or CIDR, one per family. */
  requestedIps?: string[];
  /** The pod interface's MAC the caller asks for (CNI `mac` capability). */
  requestedMac?: string;
  /** Bandwidth limits (CNI bandwidth capability: bits/s and bits); else from the pod annotations. */
  bandwidth?: unknown;
  /** Host ports to DNAT to the pod: { protocol, containerPort, hostPort, hostIp } each. */
  portMappings?: unknown[];
  /** The pod's cgroup parent as the runtime knows it (CRI's linux.cgroup_parent; the CNI cgroupPath capability). */
  cgroupParent?: unknown;
  /** Who asked (metrics, spans, logs); default kni. */
  entryPoint?: EntryPoint;
}

export interface RouteInfo {
  destination: string;
  gateway: string;
  interface: string;
}

export interface NodeStatus {
  name: string;
  ready: boolean;
  reason: string;
  bridge: string;
  podLink: PodWiring;
  mtu: number;
  ranges: string[];
  gateways: string[];
  masquerade: boolean;
  nonMasqueradeCidrs: string[];
  /** node-lifecycle.ts warn(): what on the node works against the pods' networking. */
  warnings: string[];
  /** What was last found undone on the node and put back, newest last (NodeLifecycle.recordRepair). */
  repairs: { time: string; what: string }[];
  /** The conflist kni last wrote for CNI-calling runtimes: its file, CNI version and plugins in order (others chained after kni-cni). */
  cniConfig?: CniConfigStatus;
}

/** The CNI network kni runs as the default network (GetNode's default_cni). */
export interface DefaultCniStatus {
  file: string;
  name: string;
  cniVersion: string;
  plugins: string[];
  auto: boolean;
  chrootDir: string;
  readinessIndicatorFile: string;
}

export interface CniConfigStatus {
  file: string;
  cniVersion: string;
  plugins: string[];
}

/** Pod annotations that tell a sandbox's kind where the runtime handler is not passed (CNI). */
export const KIND_ANNOTATION = 'kni.dev/sandbox-kind';
export const HANDLER_ANNOTATION = 'kni.dev/runtime-handler';
/** "off": the pod's packets may carry any source address (a router pod), where the config allows it. */
export const SOURCE_CHECK_ANNOTATION = 'kni.dev/source-check';

/** A record's phases on disk: the attach finished (its commit); a release began (the kernel may be half undone). */
export const ATTACHED = 'attached' as const;
export const DETACHING = 'detaching' as const;

/** The host end's name: "kni" + 12 hex digits of a hash, unique per sandbox and interface. */
// The one-shot crypto.hash (Node 20.12) skips the Hash object's layers: run cold, as between
// requests, a name took 57 µs with createHash and 19 with it (docs/performance-history.md).
const sha256Hex: (data: string) => string =
  typeof crypto.hash === 'function' ? (data) => crypto.hash('sha256', data, 'hex') : (data) => crypto.createHash('sha256').update(data).digest('hex');

export const hostVethName = (sandboxId: string, ifName: string): string => `kni${sha256Hex(`${sandboxId}/${ifName}`).slice(0, 12)}`;

export const isHostVethName = (name: string): boolean => /^kni[0-9a-f]{12}$/.test(name);
