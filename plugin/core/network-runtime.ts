// The network runtime: every entry point (KNI POC API, kni API, CNI, NRI, containerd) calls
// attach and detach here. It owns the sandboxes, the IPAM, the state store and the netlink
// socket; a sandbox id is the key for all of them. The node side is NodeLifecycle (this.node).
import path from 'node:path';
import { Config, PodWiring, SandboxKind } from './config';
import { AttachRequest, DefaultCniStatus } from './runtime-types';
import { KniError } from './errors';
import { collectGarbage, GcResult, sweepUnclaimedNetns } from './garbage-collection';
import { KeyedMutex } from './keyed-mutex';
import { log, logMs, msSince } from './log';
import { reconcile, reconcileAfterRunning, ReconcileReport } from './recovery';
import * as validate from './validate';
import { Ipam, RangeStatus } from '../ipam/ipam';
import { NetlinkSocket } from '../netlink/socket';
import { ensureNetnsDir } from '../netns/netns';
import { InterfaceRecord, NetnsRecord, PodRef, SandboxRecord, SelectedBy } from '../store/records';
import { StateStore } from '../store/state-store';
import { saveLastGiven } from '../ipam/allocation-cursor';
import { attachSeconds, detachSeconds, EntryPoint, errorsTotal } from '../observe/metrics';
import { withSpan } from '../observe/tracing';
import { NodeLifecycle } from './node-lifecycle';
import { VethBatchDelete } from '../pod/veth-batch-delete';
import { VethReaper } from '../pod/veth-reaper';
import { NetnsPool } from '../netns/netns-pool';
import { restoreState } from './restore-state';
import { repairOnNotices } from './notice-repair';
import { KernelNotices } from '../node/kernel-notices';
import { podRef, sandboxKind, updateMetadata } from './sandbox-metadata';
import { CniNetwork } from '../cni/cni-network';
import { CniResultCache } from '../cni/cni-result-cache';
import { DefaultNetworkFile, loadCniNetwork } from '../cni/load-network';
import { cniIpamStatus } from '../cni/cni-ipam-status';
import { EventLog } from './events';
import { ExtensionRegistry } from '../extensions/extension-registry';
import { definitionOf, NetworkBackend } from './network-backend';
import { BuiltInBackend, PodPolicy } from './builtin-backend';
import { CniBackend } from './cni-backend';
import { attachSandbox } from './sandbox-attach';
import { backendOfInterface } from './network-plan';
import { attachNetwork, detachNetwork, NetworkRequest } from './running-networks';
import { releaseSandbox, removeInterface } from './sandbox-release';
import { sandboxProblems } from './sandbox-check';
import { NetworkDefinitions } from '../networks/network-definitions';
import { scanNetworkDir } from '../networks/network-files';

export type { GcResult } from './garbage-collection';
export type { ReconcileReport } from './recovery';

export { ATTACHED, DETACHING, HANDLER_ANNOTATION, hostVethName, isHostVethName, KIND_ANNOTATION } from './runtime-types';
export type { AttachRequest, NodeStatus, RouteInfo } from './runtime-types';

export class NetworkRuntime {
  // Core state, shared with recovery.ts and garbage-collection.ts (not for entry points).
  readonly sandboxes = new Map<string, SandboxRecord>();
  readonly netns = new Map<string, NetnsRecord>();
  readonly locks = new KeyedMutex();
  readonly store: StateStore;
  /** What the allocation-cursor file holds (written off the attach path: allocation-cursor.ts). */
  private readonly lastGivenWritten: { text: string; error?: string } = { text: '' };
  /** Replaced only by adoptRanges, while no sandbox holds an address. */
  ipam: Ipam;
  host!: NetlinkSocket;
  readonly node = new NodeLifecycle(this);
  /** Host veths of detached pods, deleted in batches after the detach answered. */
  readonly reaper = new VethReaper();
  /** The kernel's notices of links and routes deleted (a pod's veth repaired at once; the node agent's routes). */
  readonly notices = new KernelNotices();
  /** Host veths deleted before the detach answers (a pod end that could not be set aside), those of concurrent detaches together. */
  readonly vethDelete = new VethBatchDelete();
  /** Network namespaces made ahead of CreateNetwork. */
  readonly netnsPool = new NetnsPool(() => this.cfg.netnsPoolSize);
  /** How new pods are wired: the config's podLink, "auto" resolved at start (restore-state.ts). */
  podLink: PodWiring = 'bridge';
  /** Every pod network change, for Watch. */
  readonly events = new EventLog();
  private ipamListeners: (() => void)[] = [];
  private sweeper?: NodeJS.Timeout;

  /** The CNI network that wires every pod instead of the built-in one (defaultNetwork.cni). */
  readonly cni?: CniNetwork;
  private readonly cniFile?: DefaultNetworkFile;
  private cniFileWatch?: NodeJS.Timeout;
  /** kni's built-in network, and the backend of the default network (one of the two). */
  readonly builtin = new BuiltInBackend(this);
  readonly defaultBackend: NetworkBackend;
  /** Every CNI network's cached ADD results (and configs), for DEL, CHECK and GC after a restart. */
  readonly cniCache: CniResultCache;
  /** Secondary network definitions (NetworkAttachmentDefinitions, networks.dir). */
  readonly networks: NetworkDefinitions;
  /** Network policy for the default network's pods, while kni enforces it (plugin/kube/policy-watch.ts). */
  podPolicy?: PodPolicy;
  /** A Pod's annotations from the API (the pod watcher's cache), for entry points that pass none. */
  podAnnotations?: (namespace: string, name: string) => Record<string, string> | undefined;
  /** The devices the kubelet gave a pod, by resource name (main.ts: its pod-resources API). */
  podDevices: (namespace: string, name: string) => Promise<Map<string, string[]>> = () => Promise.reject(new KniError('UNAVAILABLE', 'this kni has no kubelet pod-resources API to ask for devices'));

  /** `defaultCni`: the conflist "auto" found (defaultNetwork.cni stays "auto", as the ConfigMap says). */
  constructor(readonly cfg: Config, stateDir: string, defaultCni = cfg.defaultNetwork.cni) {
    this.store = new StateStore(stateDir);
    this.ipam = new Ipam(cfg.ranges);
    this.cniCache = new CniResultCache(path.join(stateDir, 'cni-results'));
    if (defaultCni) {
      this.cni = loadCniNetwork(defaultCni, cfg.defaultNetwork, path.join(stateDir, 'cni-results'));
      this.cniFile = new DefaultNetworkFile(this.cni, defaultCni);
    }
    this.defaultBackend = this.cni ? new CniBackend(this.cni, undefined, { cfg }) : this.builtin;
    this.networks = new NetworkDefinitions(path.join(stateDir, 'cni-ipam'));
    this.extensions = new ExtensionRegistry(path.join(stateDir, 'extensions'), cfg.extensions.required, () => this.node.extensionsChanged());
  }

  /** Extensions called for every attach and detach (their registrations live in the state dir). */
  readonly extensions: ExtensionRegistry;

  /** The extensions' PodAttached, before the attach commits; a failure is an event too. */
  async callExtensions(rec: SandboxRecord): Promise<void> {
    if (!this.extensions.wants('attached')) return;
    try {
      await withSpan('extensions.attached', {}, () => this.extensions.podAttached(rec));
    } catch (e) {
      this.events.emit('extension_failed', rec, (e as Error).message);
      throw e;
    }
  }

  /** Loads state, rolls back attaches a crash interrupted, and sets up the node network. */
  async start(): Promise<void> {
    this.host = new NetlinkSocket();
    this.refreshFileNetworks();
    ensureNetnsDir(this.cfg.netnsDir);
    this.extensions.load();
    await restoreState(this);
    if (!this.cfg.ranges.length && !this.cni) log('info', 'node network waits for its pod ranges', { reason: this.node.waitingReason });
    else {
      try {
        await this.node.setup();
      } catch (e) {
        log('error', 'node network setup failed; attaches will retry it', { error: (e as Error).message });
      }
    }
    // The node network was just set up: what setup wrote is not read back (four iptables processes before serving).
    await reconcile(this, { nodeJustSetUp: true }).catch((e) => log('error', 'reconcile at start failed', { error: String(e) }));
    this.notices.start();
    repairOnNotices(this);
    this.restartSweeper();
    this.watchCniFile();
    log('info', 'network runtime started', { sandboxes: this.sandboxes.size, netns: this.netns.size, ready: this.node.isSetUp });
  }

  /** The CNI default network as it runs now (undefined: the built-in network). */
  defaultCniStatus(): DefaultCniStatus | undefined {
    if (!this.cni || !this.cniFile) return undefined;
    const d = this.cfg.defaultNetwork;
    const list = this.cni.list;
    return { file: this.cniFile.file, name: list.name, cniVersion: list.cniVersion, plugins: list.plugins.map((p) => p.type), auto: d.cni === 'auto', chrootDir: d.chrootDir, readinessIndicatorFile: d.readinessIndicatorFile };
  }

  /** defaultNetwork.cni looked at every 2 s (a stat): a changed file serves the next pods. */
  private watchCniFile(): void {
    const file = this.cniFile;
    if (!file) return;
    this.cniFileWatch = setInterval(() => {
      const r = file.look();
      if (!r.changed) return;
      if (!r.problem) log('info', 'defaultNetwork.cni changed: new pods get the new config, pods already wired keep theirs', { file: file.file });
      this.node.warn('default-network-file', r.problem && `defaultNetwork.cni ${file.file} changed but cannot be used (${r.problem}): new pods keep the config read before`);
    }, 2000).unref();
  }

  stop(): void {
    if (this.sweeper) clearInterval(this.sweeper);
    if (this.cniFileWatch) clearInterval(this.cniFileWatch);
    this.notices.stop();
    this.node.stopPolling();
    this.node.loopback6.close();
    saveLastGiven(this.store.dir, this.ipam, this.lastGivenWritten);
    this.extensions.close();
    this.netnsPool.close();
    try {
      this.reaper.close();
    } catch (e) {
      log('error', 'cannot delete the retired veths; the next start\'s reconcile does', { error: (e as Error).message });
    }
    this.vethDelete.close();
    this.host?.close();
  }

  /** Calls cb after every change of address use (the node agent watches for exhaustion). */
  onIpamChange(cb: () => void): void {
    this.ipamListeners.push(cb);
  }

  ipamChanged(): void {
    for (const cb of this.ipamListeners) {
      try {
        cb();
      } catch (e) {
        log('error', 'IPAM listener failed', { error: (e as Error).message });
      }
    }
  }

  /** The reconcile/sweep interval changed live. */
  restartSweeper(): void {
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = setInterval(() => {
      sweepUnclaimedNetns(this);
      saveLastGiven(this.store.dir, this.ipam, this.lastGivenWritten);
      this.refreshFileNetworks();
      void this.extensions.checkAll();
      void this.reconcile().catch((e) => log('error', 'reconcile failed', { error: String(e) }));
    }, this.cfg.reconcileSeconds * 1000);
    this.sweeper.unref();
  }

  // --- attach / detach ---

  /** Container or VM (see sandbox-metadata.ts). */
  sandboxKind(runtimeHandler: string, annotations: Record<string, string>): SandboxKind {
    return sandboxKind(this.cfg, runtimeHandler, annotations);
  }

  podRef(pod: Partial<PodRef> = {}): PodRef {
    return podRef(pod);
  }

  /** Attaches a sandbox: one span, one log line, one histogram sample, whatever the entry point. */
  async attach(req: AttachRequest): Promise<SandboxRecord> {
    const entryPoint = req.entryPoint ?? 'kni';
    const started = process.hrtime.bigint();
    const fields = {
      sandbox: String(req.sandboxId ?? '').slice(0, 128),
      pod: req.pod?.name ? `${String(req.pod.namespace ?? '').slice(0, 63)}/${String(req.pod.name).slice(0, 253)}` : '',
      entry: entryPoint,
    };
    const attrs = () => ({ 'kni.sandbox.id': fields.sandbox, 'k8s.pod.name': String(req.pod?.name ?? '').slice(0, 253), 'k8s.namespace.name': String(req.pod?.namespace ?? '').slice(0, 63), 'kni.entry_point': entryPoint });
    try {
      const rec = await withSpan('kni.attach', attrs, () => attachSandbox(this, req));
      const s = Number(process.hrtime.bigint() - started) / 1e9;
      attachSeconds.of(entryPoint).observe(s);
      log('info', 'attach', { ...fields, kind: rec.kind, ms: logMs(s * 1e3) });
      return rec;
    } catch (e) {
      this.failed('attach', entryPoint, e, fields, started);
      throw e;
    }
  }

  private failed(operation: string, entryPoint: EntryPoint, e: unknown, fields: Record<string, unknown>, started: bigint): void {
    const code = e instanceof KniError ? e.code : 'INTERNAL';
    errorsTotal.inc({ entry_point: entryPoint, operation, code });
    log(code === 'INTERNAL' ? 'error' : 'warn', `${operation} failed`, { ...fields, code, error: (e as Error)?.message ?? String(e), ms: msSince(started) });
  }

  /** Undoes an attach that did not commit; what cannot be undone now stays for reconcile. */
  async rollback(rec: SandboxRecord): Promise<void> {
    await this.release(rec, false).catch((err) => log('error', 'rollback of a failed attach failed; reconcile retries', { sandbox: rec.id, error: String(err) }));
  }

  /**
   * Releases everything attach took. Unknown or already-released ids succeed (false).
   * releaseNetns also unpins the netns kni created for the sandbox. netnsEnding: the caller
   * tears the netns down next (a runtime stopping the sandbox), so the answer need not wait for
   * the kernel's veth delete (plugin/pod/veth-reaper.ts); nor does it in a netns kni made.
   */
  async detach(sandboxId: string, releaseNetns = true, entryPoint: EntryPoint = 'kni', netnsEnding = false): Promise<boolean> {
    const started = process.hrtime.bigint();
    const fields = { sandbox: String(sandboxId ?? '').slice(0, 128), entry: entryPoint };
    try {
      const id = validate.sandboxId(sandboxId);
      const released = await withSpan('kni.detach', { 'kni.sandbox.id': id, 'kni.entry_point': entryPoint }, () =>
        this.locks.run(id, async () => {
          const rec = this.sandboxes.get(id);
          if (!rec) return undefined;
          await this.release(rec, releaseNetns, netnsEnding);
          return rec;
        }),
      );
      const s = Number(process.hrtime.bigint() - started) / 1e9;
      detachSeconds.of(entryPoint).observe(s);
      const pod = released?.pod.name ? `${released.pod.namespace}/${released.pod.name}` : '';
      log(released ? 'info' : 'debug', released ? 'detach' : 'detach: nothing to release', { ...fields, pod, ms: logMs(s * 1e3) });
      return released !== undefined;
    } catch (e) {
      this.failed('detach', entryPoint, e, fields, started);
      throw e;
    }
  }

  /** Releases everything a sandbox holds (see sandbox-release.ts). */
  release(rec: SandboxRecord, releaseNetns: boolean, netnsEnding = false): Promise<void> {
    return releaseSandbox(this, rec, releaseNetns, netnsEnding);
  }

  /** Removes one interface of an attached sandbox whose lock the caller holds. */
  removeInterface(rec: SandboxRecord, itf: InterfaceRecord): Promise<void> {
    return removeInterface(this, rec, itf);
  }

  /** The backend that undoes or checks an interface (see network-plan.ts). */
  backendFor(rec: SandboxRecord, itf: InterfaceRecord): NetworkBackend | undefined {
    return backendOfInterface(this, rec, itf);
  }

  /** Re-reads networks.dir (at start, each reconcile tick, and when a pod names a network not known). */
  refreshFileNetworks(missing?: string): void {
    if (!this.cfg.networks.dir || (missing && this.networks.get(missing)?.config)) return;
    this.networks.replace('file', scanNetworkDir(this.cfg.networks.dir, this.networks.ipamDataDir));
  }

  /** Adds one network to an attached sandbox (see running-networks.ts). */
  attachNetwork(sandboxId: string, selection: NetworkRequest, selectedBy: SelectedBy = 'api'): Promise<InterfaceRecord> {
    return attachNetwork(this, sandboxId, selection, selectedBy);
  }

  /** Removes a secondary network's interface from an attached sandbox; false when it has none of that name. */
  detachNetwork(sandboxId: string, ifName: string): Promise<boolean> {
    return detachNetwork(this, sandboxId, ifName);
  }

  /** Adds what a later hook knows to an attached sandbox (see sandbox-metadata.ts). */
  updateMetadata(sandboxId: string, meta: Omit<AttachRequest, 'sandboxId' | 'netnsPath' | 'interfaceName'>): Promise<boolean> {
    return updateMetadata(this, sandboxId, meta);
  }

  has(sandboxId: string): boolean {
    return this.sandboxes.get(sandboxId)?.phase === 'attached';
  }

  // --- queries ---

  /** Compares a sandbox's interfaces with the kernel, each through its backend (CNI: the plugins' CHECK). */
  check(sandboxId: string): Promise<string[]> {
    return sandboxProblems(this, this.get(sandboxId));
  }

  get(sandboxId: string): SandboxRecord {
    const id = validate.sandboxId(sandboxId);
    const rec = this.sandboxes.get(id);
    if (!rec || rec.phase !== 'attached') throw new KniError('NOT_FOUND', `sandbox ${id} is not attached`);
    return rec;
  }

  podCount(): number {
    return this.list().length;
  }

  list(): SandboxRecord[] {
    return [...this.sandboxes.values()].filter((r) => r.phase === 'attached');
  }

  /** Pod interfaces by their network's name as network-status gives it (kni_network_interfaces). */
  interfacesByNetwork(): Map<string, number> {
    const out = new Map<string, number>();
    for (const r of this.list()) {
      for (const i of r.interfaces) {
        if (i.adding || i.removing) continue;
        const network = definitionOf(i) || this.defaultBackend.name;
        out.set(network, (out.get(network) ?? 0) + 1);
      }
    }
    return out;
  }

  /** kni's ranges; with a CNI default network, the host-local ranges its config names. */
  ipamStatus(): RangeStatus[] {
    if (!this.cni) return this.ipam.status();
    const addresses = this.list().flatMap((r) => r.interfaces.filter((i) => !i.network).flatMap((i) => i.addresses.map((a) => a.address)));
    return cniIpamStatus(this.cni.list, addresses);
  }

  /**
   * Compares every record with the kernel and repairs, releases or removes what drifted. `now`:
   * one that begins after the one running (an operator's Reconcile: it must see what changed a
   * moment ago); else a running one is shared (the periodic sweep).
   */
  reconcile(now = false): Promise<ReconcileReport> {
    return now ? reconcileAfterRunning(this) : reconcile(this);
  }

  /** Releases every sandbox not in the live set (see garbage-collection.ts). */
  gc(live: string[], graceMs = 0, only?: EntryPoint): Promise<GcResult> {
    return collectGarbage(this, live, graceMs, only);
  }
}
