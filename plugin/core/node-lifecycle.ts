// The node side of the network runtime: setting the node network up (and again when its
// bridge went away), readiness and its reason, the pod ranges (adopted from the Node by the
// node agent), and the other nodes' pod CIDRs that pod traffic reaches unmasqueraded.
import fs from 'node:fs';
import path from 'node:path';
import { KniError } from './errors';
import { isBuiltIn } from './network-backend';
import type { SandboxRecord } from '../store/records';
import { isoTime, log } from './log';
import type { Config, PodWiring } from './config';
import type { CniConfigStatus, NodeStatus } from './runtime-types';
import type { CniNetwork } from '../cni/cni-network';
import type { ExtensionRegistry } from '../extensions/extension-registry';
import type { NetlinkSocket } from '../netlink/socket';
import { Cidr } from '../ipam/ip';
import { Ipam } from '../ipam/ipam';
import { IFF_UP, linkByName, linkDel } from '../netlink/link';
import { removeForwardRules, syncForwardRules } from '../node/forward-rules';
import { keepSetDelta, keepSets, removeMasquerade, syncMasquerade, unmasqueraded, updateMasquerade } from '../node/masquerade';
import { FALLBACK_MTU, podMtu } from '../node/node-mtu';
import { nodeNetworkDrift, setupNodeNetwork } from '../node/node-network';
import { HostPortTarget, syncHostPorts } from '../node/host-ports';
import { GuardedEnd, guardedEnd, NodeGuards } from '../node/node-guards';
import { Loopback6Ports } from '../node/loopback6-ports';
import { gatewayOf } from '../node/peer-routes';

/** What the node's network uses of the runtime. */
export interface NodeParts {
  readonly cfg: Config;
  readonly sandboxes: ReadonlyMap<string, SandboxRecord>;
  /** Replaced here by adoptRanges, while no sandbox holds an address. */
  ipam: Ipam;
  readonly host: NetlinkSocket;
  readonly cni?: CniNetwork;
  readonly extensions: Pick<ExtensionRegistry, 'gateReason'>;
  readonly podLink: PodWiring;
}

/** A pod whose default network is a CNI network gets its host ports from those plugins (portmap), not from kni. */
const onBuiltIn = (r: SandboxRecord): boolean => {
  const itf = r.interfaces.find((i) => !i.network);
  return !!itf && isBuiltIn(itf);
};

export class NodeLifecycle {
  bridgeIndex = 0;
  /** The built-in network's pods' MTU and where it came from, found at setup (node-mtu.ts). */
  private found?: { mtu: number; from: string };
  private ready = false;
  private reason = 'node network not set up yet';
  /** Other nodes' pod CIDRs (from the node agent): pod traffic to them is not masqueraded. */
  private peerCidrs: Cidr[] = [];
  /** Why there are no pod ranges yet (ranges from the Node: set by the node agent). */
  private noRangesReason = 'no pod ranges configured';
  private readyListeners: (() => void)[] = [];
  /** The ready listeners ran (the network and the required extensions were all in place once). */
  private announced = false;

  private hostPortWrites: Promise<void> = Promise.resolve();
  private readonly warnings = new Map<string, string>();
  /** The conflist kni last wrote (main.ts, when the node became ready), for GetNode. */
  cniConfig?: CniConfigStatus;
  private readonly repairListeners: ((what: string) => void)[] = [];
  private readonly warningListeners: ((key: string, text: string) => void)[] = [];
  private readonly recent: { time: string; what: string }[] = [];
  private hostPortRules = true; // unknown at start: the first write clears what a crash left

  /** kni's nftables tables: the pods' source check and the probe port's guard (node-guards.ts). */
  readonly guards = new NodeGuards();
  /** TCP host ports on [::1], relayed to their pods by kni (the kernel cannot carry them). */
  readonly loopback6 = new Loopback6Ports();

  constructor(private readonly rt: NodeParts) {}

  /** The host ends whose packets' sources are checked, with their addresses, from the records now. */
  guardedEnds(): GuardedEnd[] {
    return [...this.rt.sandboxes.values()].flatMap((r) => r.interfaces.filter((i) => isBuiltIn(i) && i.hostVeth && !i.sourceUnchecked).map(guardedEnd));
  }

  /** Both guard tables written whole from the records, the peers and the probe's port (setup, reconcile, the port changed). */
  async writeGuards(): Promise<void> {
    await this.guards.write(this.rt.cfg.peerProbe.port, this.guardedEnds(), this.peerCidrs.map(gatewayOf));
  }

  /**
   * Rewrites the host-port chains from the records, one write at a time (each computes from the
   * records when its turn comes, so the last write always has every pod's ports).
   */
  syncHostPorts(): Promise<void> {
    const next = this.hostPortWrites.then(async () => {
      const targets = this.hostPortTargets();
      if (!targets.length && !this.hostPortRules) return;
      // The links the pods are reached through: 127.0.0.1 may leave the node only through those.
      const links = [...new Set(targets.map((t) => t.hostVeth ?? this.rt.cfg.bridge))];
      await syncHostPorts(this.rt.cfg.ranges, targets, links);
      this.loopback6.sync(this.rt.cfg.ranges.some((c) => c.family === 6) ? targets : []);
      this.hostPortRules = targets.length > 0;
    });
    this.hostPortWrites = next.catch(() => undefined);
    return next;
  }

  /** The pods whose host ports are kni's to DNAT (KNI-HOSTPORTS), from the records now. */
  hostPortTargets(): HostPortTarget[] {
    return [...this.rt.sandboxes.values()].filter((r) => r.portMappings?.length && r.phase !== 'detaching' && onBuiltIn(r)).map((r) => ({
      sandbox: r.id,
      addresses: r.interfaces[0]?.addresses ?? [],
      mappings: r.portMappings!,
      ...(r.interfaces[0]?.routed ? { hostVeth: r.interfaces[0].hostVeth } : {}),
    }));
  }

  /** The MTU of the built-in network's pods: the config's, or the one found at setup. */
  get mtu(): number {
    return this.found?.mtu ?? FALLBACK_MTU;
  }

  /**
   * Something on the node that works against the pods' networking and is not kni's to change:
   * logged once when it appears or changes (and told to the onWarning listeners: in a cluster,
   * an Event on the Node), and shown by GetNode (knictl node) until cleared (no text) by the
   * check that found it.
   */
  warn(key: string, text?: string, fields: Record<string, unknown> = {}): void {
    if (!text) {
      this.warnings.delete(key);
      return;
    }
    if (this.warnings.get(key) === text) return;
    log('warn', text, fields);
    this.warnings.set(key, text);
    for (const cb of this.warningListeners) cb(key, text);
  }

  /** Told of each warning as it appears or changes (the Node's Events); those standing now at once. */
  onWarning(cb: (key: string, text: string) => void): void {
    this.warningListeners.push(cb);
    for (const [key, text] of this.warnings) cb(key, text);
  }

  /** The warning standing under this key, if any. */
  warning(key: string): string | undefined {
    return this.warnings.get(key);
  }

  /** Whether setup succeeded last time (status() also looks at the bridge). */
  get isSetUp(): boolean {
    return this.ready;
  }

  get waitingReason(): string {
    return this.noRangesReason;
  }

  /** Calls cb each time the node network becomes ready (now, if it is). */
  onReady(cb: () => void): void {
    this.readyListeners.push(cb);
    if (this.announced) cb();
  }

  /** Runs the ready listeners once the network is set up and no required extension is missing. */
  private announceIfReady(): void {
    if (this.announced || !this.ready || this.rt.extensions.gateReason()) return;
    this.announced = true;
    for (const cb of this.readyListeners) cb();
  }

  /** An extension came, went or changed health. */
  extensionsChanged(): void {
    this.announceIfReady();
  }

  async setup(): Promise<void> {
    try {
      if (this.rt.cni) {
        // A CNI default network: the node is ready when its agent's file is there (if one is
        // named) and its plugins say so (STATUS, CNI 1.1.0).
        const waiting = this.indicatorMissing();
        if (waiting) {
          this.pollIndicator();
          throw new KniError('FAILED_PRECONDITION', waiting);
        }
        await this.rt.cni.status();
        this.ready = true;
        this.reason = '';
        this.announceIfReady();
        return;
      }
      if (!this.rt.cfg.ranges.length) throw new KniError('FAILED_PRECONDITION', this.noRangesReason);
      const found = podMtu(this.rt.host, this.rt.cfg);
      if (found.mtu !== this.found?.mtu) log('info', `pods get MTU ${found.mtu}, from ${found.from}`, { mtu: found.mtu });
      this.found = found;
      this.bridgeIndex = await setupNodeNetwork(this.rt.host, this.rt.cfg, this.rt.ipam, this.peerCidrs, this.mtu);
      await this.writeGuards();
      await this.syncHostPorts();
      this.ready = true;
      this.reason = '';
      this.announceIfReady();
    } catch (e) {
      this.ready = false;
      this.announced = false;
      this.reason = (e as Error).message;
      if (e instanceof KniError) throw e;
      throw new KniError('FAILED_PRECONDITION', `node network setup failed: ${this.reason}`);
    }
  }

  /** Why the default network's readiness indicator file holds the node back ('' = it does not). */
  private indicatorMissing(): string {
    const { readinessIndicatorFile: file, chrootDir } = this.rt.cfg.defaultNetwork;
    // A host path, as the plugins see it: in kni's container, under the host's root.
    const where = file && chrootDir ? path.join(chrootDir, file) : file;
    return file && !fs.existsSync(where) ? `waiting for ${file}${where !== file ? ` (at ${where})` : ''} (defaultNetwork.readinessIndicatorFile): the default network's own agent has not written it` : '';
  }

  private indicatorPoll?: NodeJS.Timeout;

  /** Until the file comes: looked for every second (as Multus waits for it), then set up. */
  private pollIndicator(): void {
    this.indicatorPoll ??= setInterval(() => {
      if (this.indicatorMissing()) return;
      clearInterval(this.indicatorPoll);
      this.indicatorPoll = undefined;
      this.ensure().catch((e) => log('warn', 'node network setup failed after the readiness indicator file came', { error: (e as Error).message }));
    }, 1000).unref();
  }

  stopPolling(): void {
    if (this.indicatorPoll) clearInterval(this.indicatorPoll);
    this.indicatorPoll = undefined;
  }

  /** Until the pod ranges are known (from the Node), the node is not ready for this reason. */
  waitForRanges(reason: string): void {
    this.noRangesReason = reason;
    if (!this.rt.cfg.ranges.length) this.reason = reason;
  }

  /**
   * Takes the node's pod ranges (from its Node's spec.podCIDRs). While any sandbox holds an
   * address from the current ranges a change is refused; with none, the bridge is made again
   * with the new gateways.
   */
  async adoptRanges(ranges: Cidr[]): Promise<void> {
    const same = ranges.length === this.rt.cfg.ranges.length && ranges.every((c) => this.rt.cfg.ranges.some((o) => o.text === c.text));
    if (same) {
      if (!this.ready) await this.setup();
      return;
    }
    if (this.rt.sandboxes.size) {
      throw new KniError('FAILED_PRECONDITION', `pod ranges ${ranges.map((c) => c.text).join(',')} differ from ${this.rt.cfg.ranges.map((c) => c.text).join(',')}, which ${this.rt.sandboxes.size} sandbox(es) use: not applied`);
    }
    const old = this.rt.cfg.ranges;
    if (old.length) {
      await removeMasquerade(old);
      if (linkByName(this.rt.host, this.rt.cfg.bridge)) this.rt.host.request(linkDel(this.rt.cfg.bridge));
    }
    this.rt.cfg.ranges = ranges;
    this.rt.ipam = new Ipam(ranges);
    this.ready = false;
    this.announced = false;
    log('info', 'pod ranges adopted', { ranges: ranges.map((c) => c.text), previous: old.map((c) => c.text) });
    await this.setup();
  }

  /** Where pod traffic goes unmasqueraded: the cluster's pod CIDRs and nonMasqueradeCIDRs (Trace). */
  unmasqueraded(): Cidr[] {
    return unmasqueraded(this.rt.cfg, this.peerCidrs);
  }

  /**
   * Other nodes' pod CIDRs changed: the masquerade exclusions follow (no pod is touched). The
   * list is kni's once the table holds it: reconcile, comparing the table with the list, waits
   * for a write under way (it found "drift" in a chain half written before).
   */
  async setPeerCidrs(cidrs: Cidr[], change?: { added: Cidr[]; removed: Cidr[] }): Promise<void> {
    if (cidrs === this.peerCidrs) return; // the same list as before (PeerNetwork keeps it while it holds the same)
    // What changed, by identity: a peer that did not change keeps its CIDR objects, so a Node
    // event costs the guards and the masquerade table its own blocks only. PeerNetwork says
    // (`change`), unless the last write failed: then it is what changed since the last that worked.
    let added: Cidr[], removed: Cidr[];
    if (change && !this.peerWriteFailed) ({ added, removed } = change);
    else {
      const was = new Set(this.peerCidrs);
      const now = new Set(cidrs);
      added = cidrs.filter((c) => !was.has(c));
      removed = this.peerCidrs.filter((c) => !now.has(c));
    }
    if (this.ready && !this.rt.cni) {
      try {
        this.guards.changePeers(added.map(gatewayOf), removed.map(gatewayOf));
      } catch (e) {
        log('error', "cannot update the peers the probe port takes; reconcile rewrites kni's tables", { error: (e as Error).message });
      }
    }
    if (this.ready && this.rt.cfg.masquerade) {
      const cfg = this.rt.cfg;
      const write = updateMasquerade(cfg.ranges, keepSetDelta(cfg, added, removed), () => keepSets(cfg, cidrs));
      this.masqueradeWrite = write.catch(() => undefined);
      try {
        await write;
      } catch (e) {
        this.peerWriteFailed = true;
        throw e;
      }
      this.peerWriteFailed = false;
    }
    this.peerCidrs = cidrs;
  }
  private peerWriteFailed = false;

  /** A masquerade write under way (setPeerCidrs), which reconcile waits for before comparing. */
  private masqueradeWrite: Promise<void> = Promise.resolve();

  /** allowPodForwarding turned on or off live. */
  async applyForwarding(): Promise<void> {
    if (!this.rt.cfg.ranges.length) return;
    if (this.rt.cfg.allowPodForwarding) await syncForwardRules(this.rt.cfg.ranges);
    else await removeForwardRules(this.rt.cfg.ranges);
  }

  /** Masquerade turned on or off, or its nonMasqueradeCIDRs changed, live. */
  async applyMasquerade(): Promise<void> {
    if (!this.rt.cfg.ranges.length) return;
    if (this.rt.cfg.masquerade) await syncMasquerade(this.rt.cfg.ranges, keepSets(this.rt.cfg, this.peerCidrs));
    else await removeMasquerade(this.rt.cfg.ranges);
  }

  /**
   * Sets the node network up again when it is not. verify: also when the bridge kni set up is
   * gone or replaced (one RTM_GETLINK). An attach does not verify: the lookup waits for the
   * kernel's rtnl lock, which the reaper's veth deletes hold for tens of ms. A veth on a bridge that is gone fails
   * instead, and the attach then verifies and tries again (sandbox-wiring.ts).
   */
  async ensure(verify = false): Promise<void> {
    if (this.ready && (this.rt.cni || !verify)) return;
    const state = this.ready ? this.bridgeState() : 'missing';
    if (state === 'ok') return;
    const lost = this.ready ? `bridge ${this.rt.cfg.bridge} ${state === 'down' ? 'set down' : state === 'replaced' ? 'replaced' : 'gone'} behind kni's back` : '';
    if (lost) log('warn', `${lost}; setting the node network up again`, { bridge: this.rt.cfg.bridge });
    this.ready = false;
    this.announced = false;
    try {
      await this.setup();
    } catch (e) {
      throw new KniError('UNAVAILABLE', `node network is not ready: ${(e as Error).message}`);
    }
    if (lost) this.recordRepair(lost, true);
  }

  /** The bridge kni set up, as the kernel has it now (one RTM_GETLINK). */
  bridgeState(): 'ok' | 'down' | 'replaced' | 'missing' {
    const br = linkByName(this.rt.host, this.rt.cfg.bridge);
    if (!br) return 'missing';
    if (br.index !== this.bridgeIndex) return 'replaced';
    return br.flags & IFF_UP ? 'ok' : 'down';
  }

  /** Calls cb with what was found undone each time the node network is set up again after it was. */
  onRepaired(cb: (what: string) => void): void {
    this.repairListeners.push(cb);
  }

  /**
   * Something found undone on the node and put back: kept for GetNode (the last 10), and, for the
   * node network itself (`notify`), handed to the onRepaired listeners (the Node's Events).
   */
  recordRepair(what: string, notify = false): void {
    this.recent.push({ time: isoTime(), what });
    if (this.recent.length > 10) this.recent.shift();
    if (notify) for (const cb of this.repairListeners) cb(what);
  }

  /**
   * Reconcile's look at the node network beyond its bridge (nodeNetworkDrift): what was undone
   * is set up again, and returned so reconcile can say what it found.
   */
  async repairDrift(): Promise<string[]> {
    if (!this.ready || this.rt.cni) return [];
    await this.masqueradeWrite;
    const drift = [...(await nodeNetworkDrift(this.rt.host, this.rt.cfg, this.rt.ipam, this.bridgeIndex, this.peerCidrs)), ...this.guards.drift()];
    if (drift.length) {
      await this.setup();
      this.recordRepair(drift.join('; '), true);
    }
    return drift;
  }

  status(): NodeStatus {
    let ready = this.ready;
    let reason = this.reason;
    const gate = this.rt.extensions.gateReason();
    if (ready && gate) {
      ready = false;
      reason = gate;
    }
    if (ready && this.rt.cni) {
      // Gone after the node was ready (the agent stopped and cleaned up): attaches are refused until it is back.
      const waiting = this.indicatorMissing();
      if (waiting) {
        ready = false;
        reason = waiting;
        this.ready = false;
        this.announced = false;
        this.reason = waiting;
        this.pollIndicator();
      }
    }
    if (ready && !this.rt.cni) {
      const state = this.bridgeState();
      if (state === 'down' || state === 'missing') {
        ready = false;
        reason = `bridge ${this.rt.cfg.bridge} is ${state}`;
      }
    }
    return {
      name: this.rt.cfg.name,
      ready,
      reason,
      bridge: this.rt.cfg.bridge,
      podLink: this.rt.podLink,
      mtu: this.mtu,
      ranges: this.rt.cfg.ranges.map((c) => c.text),
      gateways: this.rt.ipam.gateways().map((g) => `${g.text}/${g.prefixLength}`),
      masquerade: this.rt.cfg.masquerade,
      nonMasqueradeCidrs: this.rt.cfg.nonMasqueradeCIDRs.map((c) => c.text),
      warnings: [...this.warnings.values()],
      repairs: [...this.recent],
      ...(this.cniConfig ? { cniConfig: this.cniConfig } : {}),
    };
  }
}
