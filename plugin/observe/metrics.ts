// Prometheus metrics (prom-client). Recording is always on (a pod's timings are array writes,
// handed to prom-client when read or 250 ms later: BufferedHistogram); the endpoint is served
// only with --metrics-addr.
import http from 'node:http';
import * as prom from 'prom-client';
import { log } from '../core/log';
import { BUILD } from '../version';
import { conntrackFill } from '../node/conntrack-fill';

/** Who asked: kni's gRPC APIs, the CNI shim, NRI, containerd's PodNetworkLifecycle, GC. */
export type EntryPoint = 'kni' | 'cni' | 'nri' | 'containerd' | 'gc';

export const registry = new prom.Registry();

// kni's attach is ~1 ms; containerd-side calls reach 100 ms and more.
const buckets = [0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

/** The most observations of one label value that wait; only a flood of calls reaches it. */
const PENDING_MAX = 4096;
/** How long observations wait for prom-client when nobody reads the metrics meanwhile. */
export const FLUSH_MS = 250;

/** Observations of one label value, waiting for prom-client. */
export class PendingObservations {
  private readonly values = new Float64Array(PENDING_MAX);
  private n = 0;

  constructor(
    private readonly child: { observe(value: number): void },
    private readonly onWaiting: () => void,
  ) {}

  get waiting(): number {
    return this.n;
  }

  observe(value: number): void {
    this.values[this.n++] = value;
    if (this.n === 1) this.onWaiting();
    else if (this.n === PENDING_MAX) this.flush();
  }

  flush(): void {
    const n = this.n;
    this.n = 0;
    for (let i = 0; i < n; i++) this.child.observe(this.values[i]);
  }
}

/**
 * A histogram of one label whose observations are kept in an array and handed to prom-client
 * when the metrics are read (its collect hook), or by a timer FLUSH_MS after the first one
 * waits, off the call that made it. prom-client's observe hashes the label set and searches the
 * buckets at every call: between requests, as on a pod's attach, eight of them took ≈ 50 µs
 * against ≈ 6 for the array writes (docs/performance-history.md), and an attach makes
 * eight or more; handed on together, they cost ≈ 0.6 µs each. What is read is the same histogram.
 */
export class BufferedHistogram {
  readonly histogram: prom.Histogram<string>;
  private readonly pending = new Map<string, PendingObservations>();
  private timer?: NodeJS.Timeout;

  constructor(name: string, help: string, label: string) {
    this.histogram = new prom.Histogram({ name, help, labelNames: [label], buckets, registers: [registry], collect: () => this.flush() });
  }

  /** The observer of one label value. */
  of(value: string): PendingObservations {
    let p = this.pending.get(value);
    if (!p) this.pending.set(value, (p = new PendingObservations(this.histogram.labels(value), () => this.schedule())));
    return p;
  }

  private schedule(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => this.flush(), FLUSH_MS);
    this.timer.unref();
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    for (const p of this.pending.values()) p.flush();
  }
}

export const attachSeconds = new BufferedHistogram('kni_attach_duration_seconds', 'Time to attach a sandbox (IPAM, record, netns, veth, addresses, routes), by entry point', 'entry_point');
export const detachSeconds = new BufferedHistogram('kni_detach_duration_seconds', 'Time to detach a sandbox, by entry point', 'entry_point');

/**
 * Each step of an attach, a detach or an RPC, by the name its tracing span has (netns.open,
 * ipam.allocate, store.record, veth.create, pod.addresses, cni.add, hostports,
 * extensions.attached, …): where a slow pod start spends its time, without a trace backend.
 */
export const stepSeconds = new BufferedHistogram('kni_step_duration_seconds', 'Time of each step of an attach, a detach or an RPC, by the step\'s tracing span name', 'step');

export const errorsTotal = new prom.Counter({
  name: 'kni_errors_total',
  help: 'Failed operations by entry point, operation and gRPC code',
  labelNames: ['entry_point', 'operation', 'code'] as const,
  registers: [registry],
});

export const rpcErrorsTotal = new prom.Counter({
  name: 'kni_rpc_errors_total',
  help: 'Failed gRPC calls on the kni socket, by service, method and gRPC code',
  labelNames: ['service', 'method', 'code'] as const,
  registers: [registry],
});

/** kni_build_info{version,commit} 1: which kni runs where (a Prometheus convention). */
new prom.Gauge({ name: 'kni_build_info', help: "kni's version and the commit it was built from (always 1)", labelNames: ['version', 'commit'] as const, registers: [registry] }).set(BUILD, 1);

export const driftFindings = new prom.Counter({
  name: 'kni_drift_findings_total',
  help: 'What reconcile (records and node network against the kernel) and the peer route check found changed or left behind, by object: node_network, sandbox, leftover, host_ports, peer_route, cni_config',
  labelNames: ['object'] as const,
  registers: [registry],
});

export const gcReleasedTotal = new prom.Counter({
  name: 'kni_gc_released_total',
  help: 'Objects released by garbage collection (sandbox or netns)',
  labelNames: ['object'] as const,
  registers: [registry],
});

export const nriConnected = new prom.Gauge({
  name: 'kni_nri_connected',
  help: '1 while the NRI plugin is registered with the runtime',
  registers: [registry],
});

export const apiConnected = new prom.Gauge({
  name: 'kni_kubernetes_api_connected',
  help: '1 while the Node watch is connected to the API server',
  registers: [registry],
});

export const policyProblems = new prom.Gauge({
  name: 'kni_policy_problems',
  help: 'What the cluster\'s policies name that kni cannot enforce as written (each said in the log and an Event on its policy), by kind of policy',
  labelNames: ['kind'] as const,
  registers: [registry],
});

export const watchRestartsTotal = new prom.Counter({
  name: 'kni_kubernetes_watch_restarts_total',
  help: 'Watches of the Kubernetes API (Nodes, the ConfigMap, NetworkAttachmentDefinitions, Pods) that broke and were started again',
  labelNames: ['resource'] as const,
  registers: [registry],
});

export const peerNodes = new prom.Gauge({
  name: 'kni_peer_nodes',
  help: 'Other nodes of the cluster kni routes to',
  registers: [registry],
});

new prom.Gauge({
  name: 'kni_conntrack_entries',
  help: "The kernel's connection tracking table in kni's network namespace (the node's): state in_use (nf_conntrack_count) or max (nf_conntrack_max); no series without conntrack",
  labelNames: ['state'] as const,
  registers: [registry],
  collect() {
    const fill = conntrackFill();
    if (!fill) return;
    this.set({ state: 'in_use' }, fill.entries);
    this.set({ state: 'max' }, fill.max);
  },
});

export const peerProbes = new prom.Gauge({
  name: 'kni_peer_probes',
  help: "kni's probes of other nodes' pod networks through its routes, by their last outcome (answers, refused, small-only, silent, unreachable)",
  labelNames: ['state'] as const,
  registers: [registry],
});

export const peerRoutes = new prom.Gauge({
  name: 'kni_peer_routes',
  help: "Routes to other nodes' pod CIDRs, by backend and state (installed, failed, unreachable)",
  labelNames: ['backend', 'state'] as const,
  registers: [registry],
});

export const configChangesTotal = new prom.Counter({
  name: 'kni_config_changes_total',
  help: "Changes of kni's ConfigMap seen live, by result (applied, refused)",
  labelNames: ['result'] as const,
  registers: [registry],
});

export const extensionCalls = new prom.Counter({
  name: 'kni_extension_calls_total',
  help: 'Calls to registered extensions, by extension, method and result (ok, error)',
  labelNames: ['extension', 'method', 'result'] as const,
  registers: [registry],
});

export const extensionSeconds = new prom.Histogram({
  name: 'kni_extension_call_duration_seconds',
  help: 'Time extensions take to answer, by extension and method',
  labelNames: ['extension', 'method'] as const,
  buckets,
  registers: [registry],
});

export const networkAttachments = new prom.Counter({
  name: 'kni_network_attachments_total',
  help: "Interfaces a CNI network's plugins were asked to add (the default network's conflist, a NetworkAttachmentDefinition, a networks.dir file), by network and result (ok, error)",
  labelNames: ['network', 'result'] as const,
  registers: [registry],
});

export const cniPluginSeconds = new prom.Histogram({
  name: 'kni_cni_plugin_duration_seconds',
  help: 'Time a CNI plugin binary takes for one command (the plugins of CNI networks: the default network\'s conflist, NetworkAttachmentDefinitions, networks.dir files), by plugin type, command and result (ok, error)',
  labelNames: ['plugin', 'command', 'result'] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  registers: [registry],
});

export interface RuntimeView {
  podCount(): number;
  ipamStatus(): { range: string; size: number; used: number; free: number }[];
  /** Pod interfaces by the network that made them (its network-status name). */
  interfacesByNetwork(): Map<string, number>;
}

/** Gauges read from the runtime when scraped (never stale, nothing to keep in step). */
export function registerRuntimeGauges(view: RuntimeView): void {
  for (const name of ['kni_pods_attached', 'kni_ipam_addresses', 'kni_network_interfaces']) registry.removeSingleMetric(name);
  new prom.Gauge({
    name: 'kni_pods_attached',
    help: 'Sandboxes attached on this node',
    registers: [registry],
    collect() {
      this.set(view.podCount());
    },
  });
  new prom.Gauge({
    name: 'kni_ipam_addresses',
    help: 'Addresses per pod range: state used or free',
    labelNames: ['range', 'state'] as const,
    registers: [registry],
    collect() {
      for (const r of view.ipamStatus()) {
        this.set({ range: r.range, state: 'used' }, r.used);
        this.set({ range: r.range, state: 'free' }, r.free);
      }
    },
  });
  new prom.Gauge({
    name: 'kni_network_interfaces',
    help: "Pod interfaces on this node by network, as network-status names it (kni's own network, a CNI default network's name, namespace/name of a definition)",
    labelNames: ['network'] as const,
    registers: [registry],
    collect() {
      // A network no pod uses any more is no series, not a stale one.
      this.reset();
      for (const [network, n] of view.interfacesByNetwork()) this.set({ network }, n);
    },
  });
}

/** Parses "host:port" (IPv6 in brackets); only loopback or an explicit address, never a guess. */
export function parseMetricsAddr(addr: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9A-Za-z.-]+)):(\d{1,5})$/.exec(addr);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port < 1 || port > 65535) throw new Error(`--metrics-addr ${JSON.stringify(addr)} is not host:port (e.g. 127.0.0.1:9273)`);
  return { host: m[1] ?? m[2], port };
}

/** Serves GET /metrics; the process metrics (RSS, CPU, event loop lag) come with it. */
/**
 * Prometheus metrics on GET /metrics, and the probes a kubelet asks on the same address: GET
 * /livez (200 while the event loop answers) and GET /readyz (200 once kni serves and the node
 * can take pods, 503 with the reason until then).
 */
export async function serveMetrics(addr: string, readiness: () => { ready: boolean; reason: string }): Promise<http.Server> {
  const { host, port } = parseMetricsAddr(addr);
  prom.collectDefaultMetrics({ register: registry, prefix: 'kni_' });
  const server = http.createServer((req, res) => {
    const route = req.method === 'GET' ? (req.url ?? '').split('?')[0] : '';
    const text = (code: number, body: string): void => void res.writeHead(code, { 'content-type': 'text/plain' }).end(body);
    if (route === '/livez') return text(200, 'ok\n');
    if (route === '/readyz') {
      const r = readiness();
      return r.ready ? text(200, 'ready\n') : text(503, `not ready: ${r.reason}\n`);
    }
    if (route !== '/metrics') return text(404, 'served here: GET /metrics, /livez, /readyz\n');
    void registry.metrics().then(
      (body) => res.writeHead(200, { 'content-type': registry.contentType }).end(body),
      (e) => res.writeHead(500).end(String(e)),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  log('info', 'serving metrics', { addr: `${host}:${port}`, path: '/metrics' });
  return server;
}
