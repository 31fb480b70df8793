// kni's own API (kni.runtime.v1.NetworkRuntime) over the core.
import * as grpc from '@grpc/grpc-js';
import { NetworkRuntime } from '../core/network-runtime';
import type { AgentStatus } from '../kube/node-agent';
import type { PodPolicyView } from '../kube/policy-watch';
import { InterfaceRecord, SandboxRecord } from '../store/records';
import { BUILD } from '../version';
import { unary } from './unary';
import { invalid } from '../core/errors';
import * as validate from '../core/validate';
import { ClusterLookups, tracePath } from '../core/path-trace';
import { family, podNetwork } from './pod-messages';
import { watch } from './watch';
import { extensionName, ExtensionStatus } from '../extensions/extension-registry';
import { definitionOf } from '../core/network-backend';

/**
 * One of AttachNetwork's *_json fields (a Multus selection's cni-args, portMappings, bandwidth):
 * JSON of the shape that key takes, checked further as the annotation's is; or none.
 */
function jsonField(field: string, text: string | undefined, shape: 'object' | 'list'): unknown {
  if (!text) return undefined;
  if (text.length > 65536) throw invalid(`${field} is longer than 64 KiB`);
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw invalid(`${field} is not JSON: ${(e as Error).message}`);
  }
  const isObject = typeof v === 'object' && v !== null && !Array.isArray(v);
  if (shape === 'list' ? !Array.isArray(v) : !isObject) throw invalid(`${field} must be a JSON ${shape}`);
  return v;
}

/** A page of what a ListPods response may carry: 3 MiB, a margin under gRPC's 4 MiB default. */
const LIST_PAGE_BYTES = 3 << 20;

/** Pods after page_token (a sandbox id) in id order, up to pageSize or LIST_PAGE_BYTES. */
export function listPodsPage(rt: NetworkRuntime, pageSize: number, pageToken: string): { pods: unknown[]; next_page_token: string } {
  if (!Number.isInteger(pageSize) || pageSize < 0) throw invalid(`page_size ${pageSize} is negative`);
  if (pageToken) validate.sandboxId(pageToken, 'page_token');
  const recs = rt.list().filter((r) => r.id > pageToken).sort((a, b) => (a.id < b.id ? -1 : 1));
  const pods: unknown[] = [];
  let bytes = 0;
  for (const r of recs) {
    const p = podNetwork(r);
    // JSON is longer than the protobuf encoding of the same pod: a safe bound for the page.
    const size = Buffer.byteLength(JSON.stringify(p));
    if (pods.length && (bytes + size > LIST_PAGE_BYTES || (pageSize && pods.length >= pageSize))) {
      return { pods, next_page_token: recs[pods.length - 1].id };
    }
    pods.push(p);
    bytes += size;
  }
  return { pods, next_page_token: '' };
}

/** The node agent as GetNode shows it (plugin/kube/node-agent.ts). */
export interface ClusterView {
  status(): AgentStatus;
  /** The cluster's Services (Trace). */
  services?: ClusterLookups;
  /** The policies selecting a pod (GetPodPolicy), while kni's policy is on. */
  podPolicy?: (rec: SandboxRecord) => PodPolicyView;
}

function clusterStatus(s: AgentStatus): Record<string, unknown> {
  return {
    node_name: s.nodeName,
    node_pod_cidrs: s.nodePodCidrs,
    pod_cidrs_source: s.podCidrsSource,
    ranges: s.ranges,
    ranges_problem: s.rangesProblem,
    backend: s.backend,
    api: { source: s.api.source, connected: s.api.connected, error: s.api.error, watch_restarts: s.api.watchRestarts },
    peers: s.peers.map((p) => ({
      name: p.name,
      internal_ips: p.internalIPs,
      pod_cidrs: p.podCidrs,
      routes: p.routes.map(({ probe, ...r }) => ({ ...r, probe: probe?.state ?? '', probe_detail: probe?.detail ?? '', probe_since: probe?.since ?? '', probe_ms: probe?.ms ?? 0 })),
    })),
  };
}

function extensionStatus(x: ExtensionStatus): Record<string, unknown> {
  return {
    name: x.name, socket: x.socket, order: x.order, events: x.events, timeout_ms: x.timeoutMs, failure_policy: x.failurePolicy,
    healthy: x.healthy, last_error: x.lastError, calls: x.calls, failures: x.failures, last_call_ms: x.lastCallMs, registered_at: x.registeredAt, owner: x.owner,
  };
}

export function runtimeHandlers(rt: NetworkRuntime, cluster?: ClusterView): grpc.UntypedServiceImplementation {
  const u = <Req>(method: string, fn: (req: Req) => Promise<unknown> | unknown) =>
    unary<Req, unknown>('kni.runtime.v1.NetworkRuntime', method, fn);
  return {
    Attach: u('Attach', async (req: any) => {
      const rec = await rt.attach({
        sandboxId: req.sandbox_id,
        netnsPath: req.netns_path,
        interfaceName: req.interface_name,
        pod: req.pod ?? undefined,
        labels: req.labels,
        annotations: req.annotations,
        runtimeHandler: req.runtime_handler,
        cgroupParent: req.cgroup_parent,
      });
      return podNetwork(rec);
    }),
    Detach: u('Detach', async (req: { sandbox_id: string; netns_ending?: boolean }) => ({ released: await rt.detach(req.sandbox_id, true, 'kni', req.netns_ending === true) })),
    Check: u('Check', async (req: { sandbox_id: string }) => {
      const problems = await rt.check(req.sandbox_id);
      return { ok: problems.length === 0, problems };
    }),
    Trace: u('Trace', (req: { sandbox_id: string; destination: string; from_node: boolean; port: string }) => tracePath(rt, req.sandbox_id, req.destination, cluster?.status().peers, cluster?.services, req.from_node, req.port)),
    GetPod: u('GetPod', (req: { sandbox_id: string }) => podNetwork(rt.get(req.sandbox_id))),
    GetPodPolicy: u('GetPodPolicy', (req: { sandbox_id: string }) => {
      const rec = rt.get(req.sandbox_id);
      const v = cluster?.podPolicy?.(rec);
      if (!v) return { enforced: false, reason: cluster ? "policy.enabled is false: kni enforces no NetworkPolicy here (knictl trace still judges them)" : 'kni is not a Kubernetes node agent here (kubernetes.nodeName is not set)', host_end: '', policies: [], problems: [] };
      return { enforced: v.enforced, reason: v.reason, host_end: v.hostEnd, policies: v.policies, problems: v.problems };
    }),
    ListPods: u('ListPods', (req: { page_size?: number; page_token?: string }) => listPodsPage(rt, req.page_size ?? 0, req.page_token ?? '')),
    GetNode: u('GetNode', () => {
      const s = rt.node.status();
      const d = rt.defaultCniStatus();
      return {
        ...(d ? { default_cni: { file: d.file, name: d.name, cni_version: d.cniVersion, plugins: d.plugins, auto: d.auto, chroot_dir: d.chrootDir, readiness_indicator_file: d.readinessIndicatorFile } } : {}),
        ready: s.ready, networks: [{ ...s, pod_link: s.podLink, non_masquerade_cidrs: s.nonMasqueradeCidrs }], warnings: s.warnings, repairs: s.repairs,
        ...(cluster ? { cluster: clusterStatus(cluster.status()) } : {}), ...(s.cniConfig ? { cni_config: { file: s.cniConfig.file, cni_version: s.cniConfig.cniVersion, plugins: s.cniConfig.plugins } } : {}),
      };
    }),
    Version: u('Version', () => ({ version: BUILD.version, commit: BUILD.commit, api_version: 'kni.runtime.v1', started_at: new Date(Date.now() - process.uptime() * 1000).toISOString() })),
    GetIPAMStatus: u('GetIPAMStatus', () => {
      const ranges = rt.ipamStatus().map((r) => ({ ...r, family: family(r.family), size: r.size.toString(), free: r.free.toString() }));
      return { ranges, exhausted: ranges.some((r) => r.exhausted) };
    }),
    RegisterExtension: u('RegisterExtension', async (req: Record<string, unknown>) => extensionStatus(await rt.extensions.register(req))),
    UnregisterExtension: u('UnregisterExtension', (req: { name: string }) => ({ removed: rt.extensions.unregister(extensionName(req.name)) })),
    ListExtensions: u('ListExtensions', () => ({ extensions: rt.extensions.list().map(extensionStatus) })),
    AttachNetwork: u('AttachNetwork', async (req: { sandbox_id: string; network: string; interface_name?: string; ips?: string[]; mac?: string; default_route?: string[]; infiniband_guid?: string; device_id?: string; cni_args_json?: string; port_mappings_json?: string; bandwidth_json?: string }) => {
      await rt.attachNetwork(req.sandbox_id, {
        network: req.network, interface: req.interface_name || undefined, ips: req.ips, mac: req.mac || undefined, defaultRoute: req.default_route,
        infinibandGuid: req.infiniband_guid || undefined, deviceId: req.device_id || undefined, cniArgs: jsonField('cni_args_json', req.cni_args_json, 'object') as Record<string, unknown> | undefined,
        portMappings: jsonField('port_mappings_json', req.port_mappings_json, 'list') as unknown[] | undefined, bandwidth: jsonField('bandwidth_json', req.bandwidth_json, 'object'),
      });
      return podNetwork(rt.get(req.sandbox_id));
    }),
    DetachNetwork: u('DetachNetwork', async (req: { sandbox_id: string; interface_name: string }) => ({ removed: await rt.detachNetwork(req.sandbox_id, validate.interfaceName(req.interface_name)) })),
    ListNetworks: u('ListNetworks', () => ({
      networks: rt.networks.list().map((d) => {
        // A pod's chosen default network is attached too.
        const on = (i: InterfaceRecord) => definitionOf(i) === `${d.namespace}/${d.name}`;
        return {
          namespace: d.namespace, name: d.name, source: d.source, origin: d.origin, valid: !!d.config, error: d.error ?? '',
          cni_name: d.config?.name ?? '', plugins: d.config?.plugins.map((p) => p.type) ?? [],
          attachments: rt.list().flatMap((r) => r.interfaces.filter(on).map((i) => `${r.id}/${i.name}`)),
          pods: [...new Set(rt.list().filter((r) => r.pod.name && r.interfaces.some(on)).map((r) => `${r.pod.namespace}/${r.pod.name}`))].sort(),
          resource_name: d.resourceName ?? '',
        };
      }),
    })),
    Watch: (call: grpc.ServerWritableStream<{ resume_token: string; sandbox_id: string }, unknown>) => watch(rt, call),
    Reconcile: u('Reconcile', async () => {
      const r = await rt.reconcile(true);
      return { repaired_sandbox_ids: r.repaired, released_sandbox_ids: r.released, removed_veths: r.removedVeths, findings: r.findings };
    }),
    GarbageCollect: u('GarbageCollect', async (req: { live_sandbox_ids: string[] }) => {
      const r = await rt.gc(req.live_sandbox_ids ?? []);
      return { released_sandbox_ids: r.releasedSandboxes, released_netns_paths: r.releasedNetns };
    }),
  };
}
