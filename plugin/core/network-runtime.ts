// The network runtime: every entry point (KNI POC API, kni API, and later the runtime hooks)
// calls these methods. It owns the IPAM, the state store and the netlink sockets; a sandbox id
// is the key for all of them.
import crypto from 'node:crypto';
import fs from 'node:fs';
import { Config, SandboxKind } from './config';
import { KniError, invalid } from './errors';
import { KeyedMutex } from './keyed-mutex';
import { log } from './log';
import * as validate from './validate';
import { Ipam, RangeStatus } from '../ipam/ipam';
import { addrList } from '../netlink/addr';
import { IFF_UP, Link, linkByName, linkList } from '../netlink/link';
import { NetlinkError, NetlinkSocket } from '../netlink/socket';
import { createPinnedNetns, ensureNetnsDir, isNodeNetns, isPinnedNetns, NotANetnsError, removePinnedNetns, socketInNetns } from '../netns/netns';
import { setupNodeNetwork } from '../node/node-network';
import { HostVethExistsError, PodInterfaceExistsError, podMac, unwirePod, VETH_ALIAS_PREFIX, wirePod } from '../pod/pod-wiring';
import { nsidOf } from '../netlink/nsid';
import { tapName, unwireVmTap, wireVmTap } from '../pod/vm-wiring';
import { InterfaceRecord, NetnsRecord, PodRef, SandboxRecord } from '../store/records';
import { StateStore } from '../store/state-store';
import { attachSeconds, detachSeconds, EntryPoint, errorsTotal, gcReleasedTotal } from '../observe/metrics';
import { withSpan } from '../observe/tracing';

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

export interface ReconcileReport {
  repaired: string[];
  released: string[];
  removedVeths: string[];
  findings: string[];
}

export interface GcResult {
  releasedSandboxes: string[];
  releasedNetns: string[];
}

/** Pod annotations that tell a sandbox's kind where the runtime handler is not passed (CNI). */
export const KIND_ANNOTATION = 'kni.dev/sandbox-kind';
export const HANDLER_ANNOTATION = 'kni.dev/runtime-handler';

/** The host end's name: "kni" + 12 hex digits of a hash, unique per sandbox and interface. */
/** The state store's mark for a sandbox whose attach finished. */
const ATTACHED = 'attached';

export const hostVethName = (sandboxId: string, ifName: string): string =>
  `kni${crypto.createHash('sha256').update(`${sandboxId}/${ifName}`).digest('hex').slice(0, 12)}`;

export const isHostVethName = (name: string): boolean => /^kni[0-9a-f]{12}$/.test(name);

export class NetworkRuntime {
  private readonly sandboxes = new Map<string, SandboxRecord>();
  private readonly netns = new Map<string, NetnsRecord>();
  private readonly locks = new KeyedMutex();
  private readonly store: StateStore;
  readonly ipam: Ipam;
  private host!: NetlinkSocket;
  private bridgeIndex = 0;
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
      if (isPinnedNetns(n.path)) {
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
      if (this.store.sandboxes.marked(rec.id, ATTACHED)) rec.phase = 'attached';
      this.sandboxes.set(rec.id, rec);
      if (rec.phase !== 'attached') interrupted.push(rec);
      const owned = this.netns.get(rec.ownedNetns);
      if (owned) owned.sandboxId = rec.id;
    }
    for (const rec of interrupted) {
      log('warn', 'rolling back an attach interrupted by a restart', { sandbox: rec.id });
      await this.release(rec, false);
    }
    if (corrupt.length) log('error', 'state records unreadable: set aside; rebuilding what the kernel still has', { files: corrupt });
    this.rebuildFromKernel();
    try {
      await this.setupNode();
    } catch (e) {
      log('error', 'node network setup failed; attaches will retry it', { error: (e as Error).message });
    }
    await this.reconcile().catch((e) => log('error', 'reconcile at start failed', { error: String(e) }));
    this.sweeper = setInterval(() => {
      this.sweepUnclaimedNetns();
      void this.reconcile().catch((e) => log('error', 'reconcile failed', { error: String(e) }));
    }, 60_000);
    this.sweeper.unref();
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
      this.bridgeIndex = await setupNodeNetwork(this.host, this.cfg, this.ipam);
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
    for (const n of [...this.netns.values()]) {
      if ((sandboxId && n.sandboxId === sandboxId) || (netnsPath && n.path === netnsPath)) this.releaseNetns(n);
    }
  }

  private releaseNetns(n: NetnsRecord): void {
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
    const netnsPath = validate.netnsPath(req.netnsPath, this.cfg.allowedNetnsRoots);
    if (isNodeNetns(netnsPath)) throw invalid(`netns path ${netnsPath} is the node's own network namespace, not a pod's`);
    const pod = this.podRef(req.pod);
    const labels = validate.stringMap(req.labels, 'labels');
    const annotations = validate.stringMap(req.annotations, 'annotations');
    const runtimeHandler = typeof req.runtimeHandler === 'string' ? req.runtimeHandler.slice(0, 253) : '';
    const kind = this.sandboxKind(runtimeHandler, annotations);

    return this.locks.run(id, async () => {
      const existing = this.sandboxes.get(id);
      if (existing) {
        if (existing.netnsPath !== netnsPath) {
          throw new KniError('ALREADY_EXISTS', `sandbox ${id} is already attached in netns ${existing.netnsPath}, not ${netnsPath}`);
        }
        if (!existing.interfaces.some((i) => i.name === ifName)) {
          throw new KniError('ALREADY_EXISTS', `sandbox ${id} is already attached with interface ${existing.interfaces[0]?.name}`);
        }
        return existing;
      }
      if (!this.nodeReady) {
        try {
          await this.setupNode();
        } catch (e) {
          throw new KniError('UNAVAILABLE', `node network is not ready: ${(e as Error).message}`);
        }
      }
      const addresses = withSpan('ipam.allocate', {}, () => this.ipam.allocate(id));
      const owned = [...this.netns.values()].find((n) => n.path === netnsPath);
      const rec: SandboxRecord = {
        id,
        phase: 'attaching',
        pod,
        labels,
        annotations,
        runtimeHandler,
        kind,
        entryPoint: req.entryPoint ?? 'kni',
        netnsPath,
        ownedNetns: owned?.name ?? '',
        interfaces: [{
          name: ifName,
          hostVeth: hostVethName(id, ifName),
          mac: podMac(addresses.find((a) => a.family === 4)?.address),
          mtu: this.cfg.mtu,
          addresses,
          // The one extra step for VM sandboxes; without vmTap the netns is left as Kata scans it.
          ...(kind === 'vm' && this.cfg.vmTap ? { tap: tapName(0) } : {}),
        }],
        createdAt: new Date().toISOString(),
      };
      try {
        withSpan('store.record', {}, () => this.store.sandboxes.put(id, rec)); // the addresses are on disk before anyone sees them
      } catch (e) {
        this.ipam.release(id, addresses);
        throw new KniError('INTERNAL', `cannot record sandbox ${id}: ${(e as Error).message}`);
      }
      this.sandboxes.set(id, rec);
      try {
        await this.wire(rec);
      } catch (e) {
        await this.release(rec, false).catch((err) => log('error', 'rollback of a failed attach failed', { sandbox: id, error: String(err) }));
        throw this.kernelError(e, rec);
      }
      rec.phase = 'attached';
      // The record on disk keeps phase "attaching"; the mark says the kernel work is done.
      // The netns record is not rewritten: its owner is found from the sandbox records at start.
      withSpan('store.commit', {}, () => this.store.sandboxes.mark(id, ATTACHED));
      if (owned) owned.sandboxId = id;
      return rec;
    });
  }

  private async wire(rec: SandboxRecord): Promise<void> {
    const fd = withSpan('netns.open', { 'kni.netns.path': rec.netnsPath }, () => fs.openSync(rec.netnsPath, 'r'));
    try {
      for (const itf of rec.interfaces) {
        try {
          wirePod(this.host, this.bridgeIndex, fd, itf, rec.id);
        } catch (e) {
          if (!(e instanceof HostVethExistsError)) throw e;
          // A leftover of an earlier attach of this very sandbox (the name is its hash).
          log('warn', 'removing a stale host veth', { sandbox: rec.id, veth: e.hostVeth });
          await unwirePod(itf);
          wirePod(this.host, this.bridgeIndex, fd, itf, rec.id);
        }
      }
      const taps = rec.interfaces.filter((i) => i.tap);
      if (taps.length) {
        const pod = socketInNetns(fd);
        try {
          for (const itf of taps) withSpan('vm.tap', { 'kni.tap': itf.tap! }, () => wireVmTap(pod, fd, itf.name, itf.tap!));
        } finally {
          pod.close();
        }
      }
    } finally {
      fs.closeSync(fd);
    }
  }

  /** Deletes what wire() made: taps, then the veths (the kernel removes the pod ends with them). */
  private async unwire(rec: SandboxRecord): Promise<void> {
    this.unwireTaps(rec);
    for (const itf of rec.interfaces) await unwirePod(itf);
  }

  /** Deletes the taps of a vm sandbox; a netns already gone took them with it. */
  private unwireTaps(rec: SandboxRecord): void {
    const taps = rec.interfaces.filter((i) => i.tap);
    if (!taps.length) return;
    let fd: number;
    try {
      fd = fs.openSync(rec.netnsPath, 'r');
    } catch {
      return;
    }
    try {
      const pod = socketInNetns(fd);
      try {
        for (const itf of taps) unwireVmTap(pod, itf.tap!);
      } finally {
        pod.close();
      }
    } catch (e) {
      if (!(e instanceof NotANetnsError)) throw e;
    } finally {
      fs.closeSync(fd);
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
   * Kernel objects first, then the record, then the addresses (which the allocator does not
   * hand out again at once). A netns kni made is simply unpinned: the kernel then tears down
   * the netns with the pod end, tap and veth in one batch (≈ 1.4 ms here against ≈ 20 ms for
   * deleting a veth, see docs/architecture.md); the host end disappears with it shortly after.
   */
  private async release(rec: SandboxRecord, releaseNetns: boolean): Promise<void> {
    const owned = this.netns.get(rec.ownedNetns);
    if (releaseNetns && owned) this.releaseNetns(owned);
    else await this.unwire(rec);
    this.store.sandboxes.delete(rec.id, [ATTACHED]);
    this.sandboxes.delete(rec.id);
    this.ipam.release(rec.id, rec.interfaces.flatMap((i) => i.addresses));
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
    return this.checkRecord(this.get(sandboxId));
  }

  private checkRecord(rec: SandboxRecord): string[] {
    const problems: string[] = [];
    for (const itf of rec.interfaces) {
      const hostEnd = linkByName(this.host, itf.hostVeth);
      if (!hostEnd) problems.push(`host veth ${itf.hostVeth} is missing`);
      else if (hostEnd.master !== this.bridgeIndex) problems.push(`host veth ${itf.hostVeth} is not on bridge ${this.cfg.bridge}`);
    }
    let fd: number;
    try {
      fd = fs.openSync(rec.netnsPath, 'r');
    } catch {
      return [...problems, `netns ${rec.netnsPath} is missing`];
    }
    try {
      const pod = socketInNetns(fd);
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
    } finally {
      fs.closeSync(fd);
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

  // --- rebuild: records lost (unreadable state), kernel objects still there ---

  /**
   * For every kni veth on the node that no record owns, finds the pod netns its peer lives in
   * (by nsid, among the netns pins kni may use and every process's netns), reads the pod end's
   * addresses and writes the sandbox record again: no address in use is ever handed out twice.
   * kni netns pins without a record get theirs back. Runs at start, before reconcile.
   */
  private rebuildFromKernel(): void {
    const orphans = this.unownedHostVeths().filter((l) => l.alias.startsWith(VETH_ALIAS_PREFIX));
    const byNsid = orphans.length ? this.netnsByNsid() : new Map<number, string>();
    for (const l of orphans) {
      const id = l.alias.slice(VETH_ALIAS_PREFIX.length);
      const netnsPath = byNsid.get(l.peerNetnsId);
      try {
        validate.sandboxId(id);
        if (!netnsPath) throw new Error(`the netns of its peer (nsid ${l.peerNetnsId}) is not among the pins or any process's netns`);
        if (this.sandboxes.has(id)) throw new Error(`sandbox ${id} already has a record with another veth`);
        const itf = this.readPodEnd(netnsPath, l.peerIndex, l.name);
        const lost = this.ipam.restore(id, itf.addresses);
        if (lost.length) throw new Error(`its addresses ${lost.map((a) => a.address).join(', ')} are held by another sandbox`);
        const rec: SandboxRecord = {
          id, phase: 'attached', pod: { name: '', namespace: '', uid: '' }, labels: {}, annotations: {}, runtimeHandler: '', kind: 'container',
          netnsPath, ownedNetns: '', interfaces: [itf], createdAt: new Date().toISOString(),
        };
        this.store.sandboxes.put(id, rec);
        this.sandboxes.set(id, rec);
        log('warn', 'sandbox record rebuilt from the kernel', { sandbox: id, netns: netnsPath, addresses: itf.addresses.map((a) => a.address) });
      } catch (e) {
        log('error', 'a kni veth has no record and cannot be rebuilt; reconcile will delete it', { veth: l.name, sandbox: id, error: (e as Error).message });
      }
    }
    for (const name of this.unrecordedPins()) {
      const path = `${this.cfg.netnsDir}/${name}`;
      const owner = [...this.sandboxes.values()].find((r) => r.netnsPath === path);
      const n: NetnsRecord = { name, path, pod: owner?.pod ?? { name: '', namespace: '', uid: '' }, sandboxId: owner?.id ?? '', createdAt: new Date().toISOString() };
      this.store.netns.put(name, n);
      this.netns.set(name, n);
      if (owner) {
        owner.ownedNetns = name;
        this.store.sandboxes.put(owner.id, owner);
      }
      log('warn', 'netns record rebuilt from its pin', { netns: path, sandbox: n.sandboxId });
    }
  }

  /**
   * kni host veths on the node that no record names. Listed before the owners are collected:
   * an attach records its veth before it creates it, so a veth listed here has no attach in flight.
   */
  private unownedHostVeths(): Link[] {
    const onNode = linkList(this.host).filter((l) => l.kind === 'veth' && isHostVethName(l.name));
    const owned = new Set([...this.sandboxes.values()].flatMap((r) => r.interfaces.map((i) => i.hostVeth)));
    return onNode.filter((l) => !owned.has(l.name));
  }

  /** kni-made netns pins (kni-<16 hex>) under netnsDir that have no record. */
  private unrecordedPins(): string[] {
    let names: string[];
    try {
      names = fs.readdirSync(this.cfg.netnsDir);
    } catch {
      return [];
    }
    return names.filter((n) => {
      if (!/^kni-[0-9a-f]{16}$/.test(n) || this.netns.has(n)) return false;
      const p = `${this.cfg.netnsDir}/${n}`;
      if (isPinnedNetns(p)) return true;
      removePinnedNetns(p); // an empty file a crash left between creating it and the pin
      return false;
    });
  }

  /** nsid → a path to that netns: pins under the allowed roots first, then /proc/<pid>/ns/net. */
  private netnsByNsid(): Map<number, string> {
    const out = new Map<number, string>();
    const candidates: string[] = [];
    for (const root of new Set([this.cfg.netnsDir, ...this.cfg.allowedNetnsRoots])) {
      try {
        for (const f of fs.readdirSync(root)) candidates.push(`${root}/${f}`);
      } catch {
        // a root that does not exist on this node
      }
    }
    for (const pid of fs.readdirSync('/proc').filter((p) => /^[1-9][0-9]*$/.test(p))) candidates.push(`/proc/${pid}/ns/net`);
    for (const p of candidates) {
      let fd = -1;
      try {
        fd = fs.openSync(p, 'r');
        const nsid = nsidOf(this.host, fd);
        if (nsid >= 0 && !out.has(nsid)) out.set(nsid, p);
      } catch {
        // not a netns, or gone meanwhile
      } finally {
        if (fd >= 0) fs.closeSync(fd);
      }
    }
    return out;
  }

  /** The pod end of a veth as an interface record: name, MAC, MTU and kni's addresses on it. */
  private readPodEnd(netnsPath: string, index: number, hostVeth: string): InterfaceRecord {
    const fd = fs.openSync(netnsPath, 'r');
    try {
      const pod = socketInNetns(fd);
      try {
        const link = linkList(pod).find((x) => x.index === index);
        if (!link) throw new Error(`no interface ${index} in ${netnsPath}`);
        const addresses = addrList(pod)
          .filter((a) => a.index === index)
          .map((a) => this.ipam.describe(a.address))
          .filter((a): a is NonNullable<typeof a> => a !== undefined);
        if (!addresses.length) throw new Error(`${link.name} in ${netnsPath} has no address in the pod ranges`);
        return { name: link.name, hostVeth, mac: link.mac, mtu: link.mtu, addresses };
      } finally {
        pod.close();
      }
    } finally {
      fs.closeSync(fd);
    }
  }

  // --- reconcile: the kernel drifted behind kni's back ---

  /**
   * Compares every record with the kernel. A sandbox whose netns is gone is released; one whose
   * veth (or an address on it) is gone is wired again from its record (same addresses); a kni
   * veth on the bridge that no record owns is deleted. Each finding is logged and reported.
   */
  async reconcile(): Promise<ReconcileReport> {
    if (this.reconciling) return this.reconciling;
    this.reconciling = this.reconcileNow().finally(() => (this.reconciling = undefined));
    return this.reconciling;
  }

  private reconciling?: Promise<ReconcileReport>;

  private async reconcileNow(): Promise<ReconcileReport> {
    const report: ReconcileReport = { repaired: [], released: [], removedVeths: [], findings: [] };
    const found = (msg: string, fields: Record<string, unknown>) => {
      report.findings.push(msg);
      log('warn', `reconcile: ${msg}`, fields);
    };
    for (const id of [...this.sandboxes.keys()]) {
      await this.locks.run(id, async () => {
        const rec = this.sandboxes.get(id);
        if (!rec || rec.phase !== 'attached') return;
        if (!isPinnedNetns(rec.netnsPath)) {
          await this.release(rec, true);
          report.released.push(id);
          found(`sandbox ${id}: netns ${rec.netnsPath} is gone; released its addresses and veth`, { sandbox: id });
          return;
        }
        const problems = this.checkRecord(rec);
        if (!problems.length) return;
        try {
          await this.unwire(rec);
          await this.wire(rec);
          report.repaired.push(id);
          found(`sandbox ${id}: ${problems.join('; ')}; wired again with the same addresses`, { sandbox: id });
        } catch (e) {
          await this.release(rec, true).catch(() => undefined);
          report.released.push(id);
          found(`sandbox ${id}: ${problems.join('; ')}; cannot wire it again (${(e as Error).message}); released`, { sandbox: id });
        }
      });
    }
    for (const l of this.unownedHostVeths()) {
      try {
        await unwirePod({ hostVeth: l.name });
        report.removedVeths.push(l.name);
        found(`veth ${l.name} belongs to no sandbox; deleted`, { veth: l.name });
      } catch (e) {
        found(`veth ${l.name} belongs to no sandbox; cannot delete it: ${(e as Error).message}`, { veth: l.name });
      }
    }
    return report;
  }

  // --- garbage collection ---

  /**
   * Releases every sandbox not in the live set, and the netns kni made that nothing claims.
   * graceMs spares sandboxes attached more recently than that: a runtime lists a sandbox only
   * once its network is up, so a fresh one can be missing from a list taken at the same time.
   */
  async gc(live: string[], graceMs = 0, only?: EntryPoint): Promise<GcResult> {
    const liveSet = new Set(live.map((id) => validate.sandboxId(id, 'live sandbox id')));
    const releasedSandboxes: string[] = [];
    const releasedOwned: string[] = [];
    const cutoff = Date.now() - graceMs;
    for (const [id, rec] of [...this.sandboxes.entries()]) {
      if (liveSet.has(id) || Date.parse(rec.createdAt) > cutoff) continue;
      // A CNI GC lists the attachments the runtime made through CNI; others are not its to judge.
      if (only && (rec.entryPoint ?? 'kni') !== only) continue;
      const ownedPath = this.netns.get(rec.ownedNetns)?.path;
      if (await this.detach(id, true, 'gc')) {
        releasedSandboxes.push(id);
        if (ownedPath) releasedOwned.push(ownedPath);
      }
    }
    gcReleasedTotal.inc({ object: 'netns' }, releasedOwned.length);
    const releasedNetns = [...releasedOwned, ...this.sweepUnclaimedNetns(liveSet)];
    gcReleasedTotal.inc({ object: 'sandbox' }, releasedSandboxes.length);

    if (releasedSandboxes.length || releasedNetns.length) log('info', 'garbage collected', { sandboxes: releasedSandboxes, netns: releasedNetns });
    return { releasedSandboxes, releasedNetns };
  }

  /** Netns kni created whose sandbox is gone, or that no attach claimed within the grace time. */
  private sweepUnclaimedNetns(live?: Set<string>): string[] {
    const released: string[] = [];
    const cutoff = Date.now() - this.cfg.unclaimedNetnsGraceSeconds * 1000;
    for (const n of [...this.netns.values()]) {
      const orphan = n.sandboxId
        ? live !== undefined && !live.has(n.sandboxId) && !this.sandboxes.has(n.sandboxId)
        : Date.parse(n.createdAt) < cutoff;
      if (!orphan) continue;
      this.releaseNetns(n);
      released.push(n.path);
    }
    gcReleasedTotal.inc({ object: 'netns' }, released.length);
    return released;
  }
}
