// The network runtime: every entry point (KNI POC API, kni API, and later the runtime hooks)
// calls these methods. It owns the IPAM, the state store and the netlink sockets; a sandbox id
// is the key for all of them.
import crypto from 'node:crypto';
import { Config, SandboxKind } from './config';
import { KniError, invalid } from './errors';
import { collectGarbage, GcResult, sweepUnclaimedNetns } from './garbage-collection';
import { KeyedMutex } from './keyed-mutex';
import { log } from './log';
import { rebuildFromKernel, reconcile, ReconcileReport } from './recovery';
import * as validate from './validate';
import { Ipam, RangeStatus } from '../ipam/ipam';
import { addrList } from '../netlink/addr';
import { IFF_UP, linkByName, linkDel } from '../netlink/link';
import { Cidr } from '../ipam/ip';
import { removeMasquerade, syncMasquerade } from '../node/masquerade';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { createPinnedNetns, ensureNetnsDir, NotANetnsError, removePinnedNetns, socketInNetns } from '../netns/netns';
import { isNetnsPin, NetnsHandle, openNetns, reopenRecordedNetns } from '../netns/open-netns';
import { setupNodeNetwork } from '../node/node-network';
import { HostVethExistsError, PodInterfaceExistsError, podMac, unwirePod, wirePod } from '../pod/pod-wiring';
import { tapName, unwireVmTap, wireVmTap } from '../pod/vm-wiring';
import { NetnsRecord, PodRef, SandboxRecord } from '../store/records';
import { StateStore } from '../store/state-store';
import { attachSeconds, detachSeconds, EntryPoint, errorsTotal } from '../observe/metrics';
import { withSpan } from '../observe/tracing';

export type { GcResult } from './garbage-collection';
export type { ReconcileReport } from './recovery';

export interface AttachRequest {
  sandboxId: string;
  netnsPath: string;
  interfaceName?: string;
  pod?: Partial<PodRef>;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  runtimeHandler?: string;
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
  mtu: number;
  ranges: string[];
  gateways: string[];
}

/** Pod annotations that tell a sandbox's kind where the runtime handler is not passed (CNI). */
export const KIND_ANNOTATION = 'kni.dev/sandbox-kind';
export const HANDLER_ANNOTATION = 'kni.dev/runtime-handler';

/** The state store's marks: the attach finished; a release began (the kernel may be half undone). */
export const ATTACHED = 'attached';
export const DETACHING = 'detaching';

/** The host end's name: "kni" + 12 hex digits of a hash, unique per sandbox and interface. */
export const hostVethName = (sandboxId: string, ifName: string): string =>
  `kni${crypto.createHash('sha256').update(`${sandboxId}/${ifName}`).digest('hex').slice(0, 12)}`;

export const isHostVethName = (name: string): boolean => /^kni[0-9a-f]{12}$/.test(name);

export class NetworkRuntime {
  // Core state, shared with recovery.ts and garbage-collection.ts (not for entry points).
  readonly sandboxes = new Map<string, SandboxRecord>();
  readonly netns = new Map<string, NetnsRecord>();
  readonly locks = new KeyedMutex();
  readonly store: StateStore;
  /** Replaced only by adoptRanges, while no sandbox holds an address. */
  ipam: Ipam;
  host!: NetlinkSocket;
  /** Other nodes' pod CIDRs (from the node agent): pod traffic to them is not masqueraded. */
  private peerCidrs: Cidr[] = [];
  /** Why there are no pod ranges yet (ranges from the Node: set by the node agent). */
  private noRangesReason = 'no pod ranges configured';
  private ipamListeners: (() => void)[] = [];
  bridgeIndex = 0;
  private nodeReady = false;
  private nodeReason = 'node network not set up yet';
  private sweeper?: NodeJS.Timeout;
  private readyListeners: (() => void)[] = [];

  constructor(readonly cfg: Config, stateDir: string) {
    this.store = new StateStore(stateDir);
    this.ipam = new Ipam(cfg.ranges);
  }

  /** Loads state, rolls back attaches a crash interrupted, and sets up the node network. */
  async start(): Promise<void> {
    this.host = new NetlinkSocket();
    ensureNetnsDir(this.cfg.netnsDir);
    const netnsState = this.store.netns.loadAll();
    const sandboxState = this.store.sandboxes.loadAll();
    const corrupt = [...netnsState.corrupt.map((f) => `netns/${f}`), ...sandboxState.corrupt.map((f) => `sandboxes/${f}`)];
    for (const n of netnsState.records) {
      if (isNetnsPin(n.path)) {
        this.netns.set(n.name, n);
      } else {
        removePinnedNetns(n.path); // the crash came before the pin: at most an empty file
        this.store.netns.delete(n.name);
      }
    }
    const interrupted: SandboxRecord[] = [];
    for (const rec of sandboxState.records) {
      const addresses = rec.interfaces.flatMap((i) => i.addresses);
      const lost = this.ipam.restore(rec.id, addresses);
      if (lost.length) log('error', 'sandbox record claims addresses held by another record or outside the ranges', { sandbox: rec.id, addresses: lost.map((a) => a.address) });
      if (this.store.sandboxes.marked(rec.id, DETACHING)) rec.phase = 'detaching';
      else if (this.store.sandboxes.marked(rec.id, ATTACHED)) rec.phase = 'attached';
      this.sandboxes.set(rec.id, rec);
      if (rec.phase !== 'attached') interrupted.push(rec);
      const owned = this.netns.get(rec.ownedNetns);
      if (owned) owned.sandboxId = rec.id;
    }
    for (const rec of interrupted) {
      const what = rec.phase === 'detaching' ? 'a detach' : 'an attach';
      log('warn', `rolling back ${what} interrupted by a restart`, { sandbox: rec.id });
      await this.release(rec, rec.phase === 'detaching').catch((e) => log('error', `cannot roll back ${what}; reconcile retries`, { sandbox: rec.id, error: (e as Error).message }));
    }
    if (corrupt.length) log('error', 'state records unreadable: set aside; rebuilding what the kernel still has', { files: corrupt });
    rebuildFromKernel(this);
    if (!this.cfg.ranges.length) log('info', 'node network waits for its pod ranges', { reason: this.noRangesReason });
    else {
      try {
        await this.setupNode();
      } catch (e) {
        log('error', 'node network setup failed; attaches will retry it', { error: (e as Error).message });
      }
    }
    await this.reconcile().catch((e) => log('error', 'reconcile at start failed', { error: String(e) }));
    this.restartSweeper();
    log('info', 'network runtime started', { sandboxes: this.sandboxes.size, netns: this.netns.size, ready: this.nodeReady });
  }

  /** Calls cb each time the node network becomes ready (now, if it is). */
  onNodeReady(cb: () => void): void {
    this.readyListeners.push(cb);
    if (this.nodeReady) cb();
  }

  stop(): void {
    if (this.sweeper) clearInterval(this.sweeper);
    this.host?.close();
  }

  async setupNode(): Promise<void> {
    try {
      if (!this.cfg.ranges.length) throw new KniError('FAILED_PRECONDITION', this.noRangesReason);
      this.bridgeIndex = await setupNodeNetwork(this.host, this.cfg, this.ipam, this.peerCidrs);
      const wasReady = this.nodeReady;
      this.nodeReady = true;
      this.nodeReason = '';
      if (!wasReady) for (const cb of this.readyListeners) cb();
    } catch (e) {
      this.nodeReady = false;
      this.nodeReason = (e as Error).message;
      if (e instanceof KniError) throw e;
      throw new KniError('FAILED_PRECONDITION', `node network setup failed: ${this.nodeReason}`);
    }
  }

  /** Until the pod ranges are known (from the Node), the node is not ready for this reason. */
  waitForRanges(reason: string): void {
    this.noRangesReason = reason;
    if (!this.cfg.ranges.length) this.nodeReason = reason;
  }

  /**
   * Takes the node's pod ranges (from its Node's spec.podCIDRs). While any sandbox holds an
   * address from the current ranges a change is refused; with none, the bridge is made again
   * with the new gateways.
   */
  async adoptRanges(ranges: Cidr[]): Promise<void> {
    const same = ranges.length === this.cfg.ranges.length && ranges.every((c) => this.cfg.ranges.some((o) => o.text === c.text));
    if (same) {
      if (!this.nodeReady) await this.setupNode();
      return;
    }
    if (this.sandboxes.size) {
      throw new KniError('FAILED_PRECONDITION', `pod ranges ${ranges.map((c) => c.text).join(',')} differ from ${this.cfg.ranges.map((c) => c.text).join(',')}, which ${this.sandboxes.size} sandbox(es) use: not applied`);
    }
    const old = this.cfg.ranges;
    if (old.length) {
      await removeMasquerade(old);
      if (linkByName(this.host, this.cfg.bridge)) this.host.request(linkDel(this.cfg.bridge));
    }
    this.cfg.ranges = ranges;
    this.ipam = new Ipam(ranges);
    this.nodeReady = false;
    log('info', 'pod ranges adopted', { ranges: ranges.map((c) => c.text), previous: old.map((c) => c.text) });
    await this.setupNode();
  }

  /** Other nodes' pod CIDRs changed: the masquerade exclusions follow (no pod is touched). */
  async setPeerCidrs(cidrs: Cidr[]): Promise<void> {
    const key = (l: Cidr[]) => l.map((c) => c.text).sort().join(',');
    if (key(cidrs) === key(this.peerCidrs)) return;
    this.peerCidrs = cidrs;
    if (this.nodeReady && this.cfg.masquerade) await syncMasquerade(this.cfg.ranges, [...this.cfg.ranges, ...cidrs]);
  }

  /** Masquerade turned on or off live. */
  async applyMasquerade(): Promise<void> {
    if (!this.cfg.ranges.length) return;
    if (this.cfg.masquerade) await syncMasquerade(this.cfg.ranges, [...this.cfg.ranges, ...this.peerCidrs]);
    else await removeMasquerade(this.cfg.ranges);
  }

  /** Calls cb after every change of address use (the node agent watches for exhaustion). */
  onIpamChange(cb: () => void): void {
    this.ipamListeners.push(cb);
  }

  private ipamChanged(): void {
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
      void this.reconcile().catch((e) => log('error', 'reconcile failed', { error: String(e) }));
    }, this.cfg.reconcileSeconds * 1000);
    this.sweeper.unref();
  }

  /**
   * Sets the node network up again when it is not, or when the bridge kni set up is gone
   * (deleted behind kni's back: its index would make the next veth fail). One RTM_GETLINK.
   */
  async ensureNode(): Promise<void> {
    if (this.nodeReady && linkByName(this.host, this.cfg.bridge)?.index === this.bridgeIndex) return;
    if (this.nodeReady) log('warn', 'bridge gone or replaced behind kni\'s back; setting the node network up again', { bridge: this.cfg.bridge });
    this.nodeReady = false;
    try {
      await this.setupNode();
    } catch (e) {
      throw new KniError('UNAVAILABLE', `node network is not ready: ${(e as Error).message}`);
    }
  }

  // --- netns kni creates (KNI CreateNetwork / DeleteNetwork) ---

  async createNetwork(pod: Partial<PodRef>): Promise<NetnsRecord> {
    const ref = this.podRef(pod);
    const name = `kni-${crypto.randomBytes(8).toString('hex')}`;
    const rec: NetnsRecord = { name, path: `${this.cfg.netnsDir}/${name}`, pod: ref, sandboxId: '', createdAt: new Date().toISOString() };
    // Recorded first, so a crash before the pin leaves a record (dropped at start), never a pin.
    this.store.netns.put(name, rec);
    try {
      createPinnedNetns(this.cfg.netnsDir, name);
    } catch (e) {
      this.store.netns.delete(name);
      throw new KniError('INTERNAL', `cannot create network namespace ${rec.path}: ${(e as Error).message}`);
    }
    this.netns.set(name, rec);
    log('info', 'netns created', { netns: rec.path, pod: ref });
    return rec;
  }

  /** Releases what a sandbox holds and the netns kni made for it (by id or by path). */
  async deleteNetwork(sandboxId: string, netnsPath: string): Promise<void> {
    if (!sandboxId && !netnsPath) throw invalid('neither a sandbox id nor a netns path was given');
    if (sandboxId) {
      validate.sandboxId(sandboxId);
      await this.detach(sandboxId, true);
    }
    if (netnsPath && (typeof netnsPath !== 'string' || netnsPath.length > 4096)) throw invalid('netns path is not a valid path');
    // Only a path given: what was attached in that netns is released now, not at the next reconcile.
    if (netnsPath) {
      for (const rec of [...this.sandboxes.values()]) if (rec.netnsPath === netnsPath) await this.detach(rec.id, true);
    }
    for (const n of [...this.netns.values()]) {
      if ((sandboxId && n.sandboxId === sandboxId) || (netnsPath && n.path === netnsPath)) this.releaseNetns(n);
    }
  }

  releaseNetns(n: NetnsRecord): void {
    removePinnedNetns(n.path);
    this.store.netns.delete(n.name);
    this.netns.delete(n.name);
    log('info', 'netns released', { netns: n.path });
  }

  // --- attach / detach ---

  /**
   * Container or VM: from the runtime handler (CRI, NRI) through cfg.runtimeHandlers, else from
   * the pod annotations (kni.dev/sandbox-kind, or kni.dev/runtime-handler mapped the same way).
   */
  sandboxKind(runtimeHandler: string, annotations: Record<string, string>): SandboxKind {
    const byHandler = (h: string | undefined) => (h ? this.cfg.runtimeHandlers[h] : undefined);
    const explicit = annotations[KIND_ANNOTATION];
    if (explicit !== undefined && explicit !== 'vm' && explicit !== 'container') {
      throw invalid(`annotation ${KIND_ANNOTATION} must be vm or container, not ${JSON.stringify(explicit)}`);
    }
    return byHandler(runtimeHandler) ?? (explicit as SandboxKind | undefined) ?? byHandler(annotations[HANDLER_ANNOTATION]) ?? 'container';
  }

  private podRef(pod: Partial<PodRef> = {}): PodRef {
    return {
      name: validate.objectName(pod.name, 'pod name'),
      namespace: validate.objectName(pod.namespace, 'pod namespace'),
      uid: validate.objectName(pod.uid?.toLowerCase(), 'pod uid'),
    };
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
    const attrs = { 'kni.sandbox.id': fields.sandbox, 'k8s.pod.name': String(req.pod?.name ?? '').slice(0, 253), 'k8s.namespace.name': String(req.pod?.namespace ?? '').slice(0, 63), 'kni.entry_point': entryPoint };
    try {
      const rec = await withSpan('kni.attach', attrs, () => this.attachSandbox(req));
      const s = Number(process.hrtime.bigint() - started) / 1e9;
      attachSeconds.observe({ entry_point: entryPoint }, s);
      log('info', 'attach', { ...fields, kind: rec.kind, ms: s * 1e3 });
      return rec;
    } catch (e) {
      this.failed('attach', entryPoint, e, fields, started);
      throw e;
    }
  }

  private failed(operation: string, entryPoint: EntryPoint, e: unknown, fields: Record<string, unknown>, started: bigint): void {
    const code = e instanceof KniError ? e.code : 'INTERNAL';
    errorsTotal.inc({ entry_point: entryPoint, operation, code });
    log(code === 'INTERNAL' ? 'error' : 'warn', `${operation} failed`, { ...fields, code, error: (e as Error)?.message ?? String(e), ms: Number(process.hrtime.bigint() - started) / 1e6 });
  }

  private async attachSandbox(req: AttachRequest): Promise<SandboxRecord> {
    const id = validate.sandboxId(req.sandboxId);
    const ifName = validate.interfaceName(req.interfaceName || 'eth0');
    const netnsPath = validate.netnsPath(req.netnsPath);
    const pod = this.podRef(req.pod);
    const labels = validate.stringMap(req.labels, 'labels');
    const annotations = validate.stringMap(req.annotations, 'annotations');
    const runtimeHandler = typeof req.runtimeHandler === 'string' ? req.runtimeHandler.slice(0, 253) : '';
    const kind = this.sandboxKind(runtimeHandler, annotations);
    // Opened once and checked as opened; this fd is the only way the attach reaches the netns.
    const ns = withSpan('netns.open', { 'kni.netns.path': netnsPath }, () => openNetns(netnsPath, { allowedRoots: this.cfg.allowedNetnsRoots }));
    try {
      return await this.locks.run(id, () => this.attachLocked(id, ifName, ns, { pod, labels, annotations, runtimeHandler, kind, entryPoint: req.entryPoint ?? 'kni' }));
    } finally {
      ns.close();
    }
  }

  private async attachLocked(
    id: string,
    ifName: string,
    ns: NetnsHandle,
    meta: Pick<SandboxRecord, 'pod' | 'labels' | 'annotations' | 'runtimeHandler' | 'kind' | 'entryPoint'>,
  ): Promise<SandboxRecord> {
    let existing = this.sandboxes.get(id);
    if (existing && existing.phase !== 'attached') {
      // An earlier release (or rolled-back attach) that could not finish: finish it first.
      await this.release(existing, false);
      existing = undefined;
    }
    if (existing) {
      if (existing.netnsPath !== ns.path) {
        throw new KniError('ALREADY_EXISTS', `sandbox ${id} is already attached in netns ${existing.netnsPath}, not ${ns.path}`);
      }
      if (existing.netnsInode !== undefined && existing.netnsInode !== ns.inode) {
        throw new KniError('ALREADY_EXISTS', `sandbox ${id} is attached in another network namespace than the one now at ${ns.path}`);
      }
      if (!existing.interfaces.some((i) => i.name === ifName)) {
        throw new KniError('ALREADY_EXISTS', `sandbox ${id} is already attached with interface ${existing.interfaces[0]?.name}`);
      }
      return existing;
    }
    await this.ensureNode();
    let addresses;
    try {
      addresses = withSpan('ipam.allocate', {}, () => this.ipam.allocate(id));
    } finally {
      this.ipamChanged();
    }
    const owned = [...this.netns.values()].find((n) => n.path === ns.path);
    const rec: SandboxRecord = {
      id,
      phase: 'attaching',
      ...meta,
      netnsPath: ns.path,
      netnsInode: ns.inode,
      ownedNetns: owned?.name ?? '',
      interfaces: [{
        name: ifName,
        hostVeth: hostVethName(id, ifName),
        mac: podMac(addresses.find((a) => a.family === 4)?.address),
        mtu: this.cfg.mtu,
        addresses,
        // The one extra step for VM sandboxes; without vmTap the netns is left as Kata scans it.
        ...(meta.kind === 'vm' && this.cfg.vmTap ? { tap: tapName(0) } : {}),
      }],
      createdAt: new Date().toISOString(),
    };
    try {
      withSpan('store.record', {}, () => this.store.sandboxes.put(id, rec)); // the addresses are on disk before anyone sees them
    } catch (e) {
      this.ipam.release(id, addresses);
      this.ipamChanged();
      throw new KniError('UNAVAILABLE', `cannot record sandbox ${id} in the state dir: ${(e as Error).message}`);
    }
    this.sandboxes.set(id, rec);
    try {
      await this.wire(rec, ns);
    } catch (e) {
      await this.rollback(rec);
      throw this.kernelError(e, rec);
    }
    try {
      // The record on disk keeps phase "attaching"; the mark says the kernel work is done.
      // The netns record is not rewritten: its owner is found from the sandbox records at start.
      withSpan('store.commit', {}, () => this.store.sandboxes.mark(id, ATTACHED));
    } catch (e) {
      // Not committed means rolled back at the next start: undo it now, so no caller sees a
      // pod that a restart would take away.
      await this.rollback(rec);
      throw new KniError('UNAVAILABLE', `cannot commit sandbox ${id} in the state dir (${(e as Error).message}); the attach was undone`);
    }
    rec.phase = 'attached';
    if (owned) owned.sandboxId = id;
    return rec;
  }

  /** Undoes an attach that did not commit; what cannot be undone now stays for reconcile. */
  private async rollback(rec: SandboxRecord): Promise<void> {
    await this.release(rec, false).catch((err) => log('error', 'rollback of a failed attach failed; reconcile retries', { sandbox: rec.id, error: String(err) }));
  }

  /** Wires every interface of a record into the netns open on ns. */
  async wire(rec: SandboxRecord, ns: NetnsHandle): Promise<void> {
    for (const itf of rec.interfaces) {
      try {
        wirePod(this.host, this.bridgeIndex, ns.fd, itf, rec.id);
      } catch (e) {
        if (!(e instanceof HostVethExistsError)) throw e;
        // A leftover of an earlier attach of this very sandbox (the name is its hash).
        log('warn', 'removing a stale host veth', { sandbox: rec.id, veth: e.hostVeth });
        unwirePod(itf);
        wirePod(this.host, this.bridgeIndex, ns.fd, itf, rec.id);
      }
    }
    const taps = rec.interfaces.filter((i) => i.tap);
    if (taps.length) {
      const pod = socketInNetns(ns.fd);
      try {
        for (const itf of taps) withSpan('vm.tap', { 'kni.tap': itf.tap! }, () => wireVmTap(pod, ns.fd, itf.name, itf.tap!));
      } finally {
        pod.close();
      }
    }
  }

  /** Deletes what wire() made: taps, then the veths (the kernel removes the pod ends with them). */
  async unwire(rec: SandboxRecord): Promise<void> {
    this.unwireTaps(rec);
    for (const itf of rec.interfaces) unwirePod(itf);
  }

  /** Deletes the taps of a vm sandbox, only in the netns it was wired in; one gone took them along. */
  private unwireTaps(rec: SandboxRecord): void {
    const taps = rec.interfaces.filter((i) => i.tap);
    if (!taps.length) return;
    const ns = reopenRecordedNetns(rec.netnsPath, rec.netnsInode);
    if (ns.state !== 'same') return;
    try {
      const pod = socketInNetns(ns.handle.fd);
      try {
        for (const itf of taps) unwireVmTap(pod, itf.tap!);
      } finally {
        pod.close();
      }
    } catch (e) {
      if (!(e instanceof NotANetnsError)) throw e;
    } finally {
      ns.handle.close();
    }
  }

  private kernelError(e: unknown, rec: SandboxRecord): KniError {
    if (e instanceof KniError) return e;
    if (e instanceof NotANetnsError) return invalid(`netns path ${rec.netnsPath} is not a network namespace`);
    if (e instanceof PodInterfaceExistsError) return new KniError('ALREADY_EXISTS', `netns ${rec.netnsPath}: ${e.message}`);
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return new KniError('NOT_FOUND', `netns path ${rec.netnsPath} does not exist`);
    if (e instanceof NetlinkError) return new KniError('INTERNAL', `sandbox ${rec.id}: kernel refused to ${e.message}`);
    return new KniError('INTERNAL', `sandbox ${rec.id}: ${(e as Error).message ?? String(e)}`);
  }

  /**
   * Releases everything attach took. Unknown or already-released ids succeed (false).
   * releaseNetns also unpins the netns kni created for the sandbox.
   */
  async detach(sandboxId: string, releaseNetns = true, entryPoint: EntryPoint = 'kni'): Promise<boolean> {
    const started = process.hrtime.bigint();
    const fields = { sandbox: String(sandboxId ?? '').slice(0, 128), entry: entryPoint };
    try {
      const id = validate.sandboxId(sandboxId);
      const released = await withSpan('kni.detach', { 'kni.sandbox.id': id, 'kni.entry_point': entryPoint }, () =>
        this.locks.run(id, async () => {
          const rec = this.sandboxes.get(id);
          if (!rec) return undefined;
          await this.release(rec, releaseNetns);
          return rec;
        }),
      );
      const s = Number(process.hrtime.bigint() - started) / 1e9;
      detachSeconds.observe({ entry_point: entryPoint }, s);
      const pod = released?.pod.name ? `${released.pod.namespace}/${released.pod.name}` : '';
      log(released ? 'info' : 'debug', released ? 'detach' : 'detach: nothing to release', { ...fields, pod, ms: s * 1e3 });
      return released !== undefined;
    } catch (e) {
      this.failed('detach', entryPoint, e, fields, started);
      throw e;
    }
  }

  /**
   * A committed sandbox is first marked "detaching" (no kernel change before that is on disk:
   * a read-only or full state dir fails the call with nothing undone, and a crash part way is
   * finished at the next start instead of being re-wired). Then the kernel objects, the record,
   * and last the addresses (which the allocator does not hand out again at once). What cannot
   * be finished stays in memory, not attached, and reconcile retries it.
   * A netns kni made is simply unpinned: the kernel then tears down the netns with the pod end,
   * tap and veth in one batch (≈ 1.4 ms here against ≈ 20 ms for deleting a veth, see
   * docs/architecture.md); the host end disappears with it shortly after.
   */
  async release(rec: SandboxRecord, releaseNetns: boolean): Promise<void> {
    if (rec.phase === 'attached') {
      try {
        this.store.sandboxes.mark(rec.id, DETACHING);
      } catch (e) {
        throw new KniError('UNAVAILABLE', `cannot record the detach of sandbox ${rec.id} in the state dir (${(e as Error).message}); nothing was changed`);
      }
      rec.phase = 'detaching';
    }
    const owned = this.netns.get(rec.ownedNetns);
    if (releaseNetns && owned) this.releaseNetns(owned);
    else await this.unwire(rec);
    this.store.sandboxes.delete(rec.id, [ATTACHED, DETACHING]);
    this.sandboxes.delete(rec.id);
    this.ipam.release(rec.id, rec.interfaces.flatMap((i) => i.addresses));
    this.ipamChanged();
  }

  /**
   * Adds what a later hook knows to an attached sandbox (NRI after the CNI path: uid, labels,
   * annotations, runtime handler). Fields already set are kept. Unknown ids answer false.
   */
  async updateMetadata(sandboxId: string, meta: Omit<AttachRequest, 'sandboxId' | 'netnsPath' | 'interfaceName'>): Promise<boolean> {
    const id = validate.sandboxId(sandboxId);
    const pod = this.podRef(meta.pod);
    const labels = validate.stringMap(meta.labels, 'labels');
    const annotations = validate.stringMap(meta.annotations, 'annotations');
    return this.locks.run(id, () => {
      const rec = this.sandboxes.get(id);
      if (!rec || rec.phase !== 'attached') return false;
      rec.pod = { name: rec.pod.name || pod.name, namespace: rec.pod.namespace || pod.namespace, uid: rec.pod.uid || pod.uid };
      rec.labels = { ...labels, ...rec.labels };
      rec.annotations = { ...annotations, ...rec.annotations };
      rec.runtimeHandler ||= typeof meta.runtimeHandler === 'string' ? meta.runtimeHandler.slice(0, 253) : '';
      if ((rec.kind ?? 'container') === 'container' && this.sandboxKind(rec.runtimeHandler, rec.annotations) === 'vm') {
        log('warn', 'a vm sandbox was wired as a container: the early hook had no runtime handler; annotate the pod with kni.dev/runtime-handler', { sandbox: id, runtimeHandler: rec.runtimeHandler });
      }
      this.store.sandboxes.put(id, rec);
      return true;
    });
  }

  has(sandboxId: string): boolean {
    return this.sandboxes.get(sandboxId)?.phase === 'attached';
  }

  // --- queries ---

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

  routes(rec: SandboxRecord): RouteInfo[] {
    return rec.interfaces.flatMap((itf) =>
      itf.addresses.flatMap((a) => [
        { destination: a.range, gateway: '', interface: itf.name },
        { destination: a.family === 4 ? '0.0.0.0/0' : '::/0', gateway: a.gateway, interface: itf.name },
      ]),
    );
  }

  /** Compares a sandbox's record with the kernel; returns what does not match. */
  check(sandboxId: string): string[] {
    const rec = this.get(sandboxId);
    const ns = reopenRecordedNetns(rec.netnsPath, rec.netnsInode);
    if (ns.state !== 'same') return [...this.hostProblems(rec), ns.reason];
    try {
      return this.checkRecord(rec, ns.handle);
    } finally {
      ns.handle.close();
    }
  }

  private hostProblems(rec: SandboxRecord): string[] {
    const problems: string[] = [];
    for (const itf of rec.interfaces) {
      const hostEnd = linkByName(this.host, itf.hostVeth);
      if (!hostEnd) problems.push(`host veth ${itf.hostVeth} is missing`);
      else if (hostEnd.master !== this.bridgeIndex) problems.push(`host veth ${itf.hostVeth} is not on bridge ${this.cfg.bridge}`);
    }
    return problems;
  }

  /** What does not match between a record and the kernel, in the netns open on ns (the record's). */
  checkRecord(rec: SandboxRecord, ns: NetnsHandle): string[] {
    const problems = this.hostProblems(rec);
    try {
      const pod = socketInNetns(ns.fd);
      try {
        const addrs = addrList(pod);
        for (const itf of rec.interfaces) {
          const link = linkByName(pod, itf.name);
          if (!link) {
            problems.push(`${itf.name} is missing in netns ${rec.netnsPath}`);
            continue;
          }
          if (!(link.flags & IFF_UP)) problems.push(`${itf.name} is down`);
          for (const a of itf.addresses) {
            if (!addrs.some((x) => x.index === link.index && x.address === a.address)) problems.push(`${itf.name} lacks address ${a.address}`);
          }
        }
      } finally {
        pod.close();
      }
    } catch (e) {
      problems.push(`cannot enter netns ${rec.netnsPath}: ${(e as Error).message}`);
    }
    return problems;
  }

  nodeStatus(): NodeStatus {
    let ready = this.nodeReady;
    let reason = this.nodeReason;
    if (ready) {
      const br = linkByName(this.host, this.cfg.bridge);
      if (!br || !(br.flags & IFF_UP)) {
        ready = false;
        reason = `bridge ${this.cfg.bridge} is ${br ? 'down' : 'missing'}`;
      }
    }
    return {
      name: this.cfg.name,
      ready,
      reason,
      bridge: this.cfg.bridge,
      mtu: this.cfg.mtu,
      ranges: this.cfg.ranges.map((c) => c.text),
      gateways: this.ipam.gateways().map((g) => `${g.text}/${g.prefixLength}`),
    };
  }

  ipamStatus(): RangeStatus[] {
    return this.ipam.status();
  }

  /** Compares every record with the kernel and repairs, releases or removes what drifted. */
  reconcile(): Promise<ReconcileReport> {
    return reconcile(this);
  }

  /** Releases every sandbox not in the live set (see garbage-collection.ts). */
  gc(live: string[], graceMs = 0, only?: EntryPoint): Promise<GcResult> {
    return collectGarbage(this, live, graceMs, only);
  }
}
