// kni as a Kubernetes node agent: one informer on all Nodes drives everything that depends on
// the cluster — this node's pod ranges (its Node's spec.podCIDRs), routes to every other
// node's pods, the masquerade exclusions, and the conditions and taint kni keeps on its Node.
// Level-triggered: any Node event that changes what kni routes by schedules one sync from the
// informer's whole cache, so a watch that broke and resumed (or re-listed) loses nothing.
import type * as K8s from '@kubernetes/client-node';
import { Config } from '../core/config';
import { log } from '../core/log';
import { NetworkRuntime } from '../core/network-runtime';
import type { ClusterLookups } from '../core/path-trace';
import type { PolicyVerdicts } from '../core/trace-hop';
import type { SandboxRecord } from '../store/records';
import type { PodPolicyView } from './policy-watch';
import { Cidr } from '../ipam/ip';
import { CHECK_SLICES, gatewayOf, NodeView, PeerNetwork, PeerRouteStatus, sameRouting } from '../node/peer-routes';
import { RTPROT_KNI } from '../netlink/route';
import { PeerProbe, ProbeResult, ProbeTarget, probeTargets } from '../node/peer-probe';
import { apiConnected, peerNodes, peerRoutes, stepSeconds } from '../observe/metrics';
import { ExtensionOwners } from './extension-owners';
import { apiError, KubeApi } from './kube-api';
import { recordEvent } from './kube-events';
import { podCidrsOfNode, readRangesFile, sameRanges, writeRangesFile } from './node-ranges';
import { claimNodeCidrs, NODE_IPAM_ANNOTATION, nodePodCidrSource, nodePodCidrTexts, setNodePodCidrs } from './node-cidr-pool';
import { shareRouting, slimNode } from './node-cache';
import { listNodes } from './node-list';
import { addressesOfNamed, podAtAddress } from './named-destinations';
import { PolicyLookup } from './network-policies';
import { answerPeerProbe } from './peer-probe-answers';
import { serviceBehind, serviceWithNodePort } from './service-backends';
import { ServiceCidrs } from './service-cidrs';
import { IPAM_EXHAUSTED_CONDITION, NodeStatusWriter } from './node-status';
import { unroutedPeersWarning } from './unrouted-peers';
import { WatchRestart } from './watch-restart';

export interface PeerView extends NodeView {
  /** With the last probe through each (peer-probe.ts), when probing is on. */
  routes: (PeerRouteStatus & { probe?: ProbeResult })[];
}

export interface AgentStatus {
  nodeName: string;
  /** The Node's spec.podCIDRs as last seen, and the ranges kni uses (from the Node, or the state dir). */
  nodePodCidrs: string[];
  /** Who set the Node's podCIDRs: "node IPAM" or "kni's nodeIpam"; '' while there are none. */
  podCidrsSource: string;
  ranges: string[];
  rangesProblem: string;
  backend: string;
  api: { source: string; connected: boolean; error: string; watchRestarts: number };
  peers: PeerView[];
}

// One view per cached Node object (the informer replaces the object when the Node changes): a
// sync at 5,000 Nodes does not build 5,000 views again for one Node event.
const cachedViews = new WeakMap<K8s.V1Node, NodeView>();
const nodeView = (n: K8s.V1Node): NodeView => {
  let v = cachedViews.get(n);
  if (!v) {
    v = { name: n.metadata?.name ?? '', internalIPs: (n.status?.addresses ?? []).filter((a) => a.type === 'InternalIP').map((a) => a.address), podCidrs: nodePodCidrTexts(n) };
    cachedViews.set(n, v);
  }
  return v;
};

/** The condition's message for the routes not installed: as many as 1,000 characters name (thousands of peers may be down). */
function noRouteMessage(bad: Iterable<PeerRouteStatus>): string {
  let text = 'kni: no route to ';
  let first = true;
  for (const s of bad) {
    text += `${first ? '' : '; '}${s.node} ${s.destination} (${s.error})`;
    first = false;
    if (text.length >= 1000) break;
  }
  return text.slice(0, 1000);
}

/** How often the peer routes are compared with the kernel (a sync that finds them all writes nothing). */
const ROUTE_CHECK_MS = 10_000;

export class NodeAgent {
  private informer?: K8s.Informer<K8s.V1Node> & K8s.ObjectCache<K8s.V1Node>;
  private readonly peers: PeerNetwork;
  private readonly probe: PeerProbe;
  readonly writer: NodeStatusWriter;
  readonly owners: ExtensionOwners;
  /** What Trace asks of the cluster: Service ranges, the Service behind a ClusterIP, the addresses of a named Service or pod, NetworkPolicies. */
  readonly services: ClusterLookups;
  /** kni's own policy's verdicts (policy-watch.ts), while it is on; else the API is read per trace. */
  policyVerdicts?: () => PolicyVerdicts;
  /** The policies selecting a pod, while kni's policy is on (GetPodPolicy). */
  podPolicy?: (rec: SandboxRecord) => PodPolicyView;
  private connected = false;
  private restart?: WatchRestart;
  private syncTimer?: NodeJS.Timeout;
  private syncing = false;
  private syncAgain = false;
  /**
   * What the next sync compares with the kernel: all of it (the kernel's notices, a relist, a
   * config change), the next part of the periodic check, or nothing (a Node event: only the
   * difference is written).
   */
  private nextCheck: 'all' | 'part' | 'difference' = 'all';
  /** Which part of the periodic check is next (CHECK_SLICES, in turn). */
  private part = 0;
  /** Every Node's view, by name, kept by the watch's events: a sync reads no list of them. */
  private readonly views = new Map<string, NodeView>();
  /** The `kni.dev/node-ipam` annotation of each Node that carries one, as last seen (routingChanged). */
  private readonly ipamOf = new Map<string, string>();
  /** The Nodes added, changed (in what kni routes by) or gone since the last sync. */
  private changed = new Set<string>();
  /** The other Nodes with no podCIDRs (unroutedPeersWarning), kept as they change. */
  private readonly unrouted = new Set<string>();
  /** The peers' summary version last reported (report). */
  private reported = '';
  private stopped = false;
  private nodePodCidrs: string[] = [];
  private rangesProblem = '';
  private podCidrsSource = '';
  private claiming = false;
  private claimProblem = '';
  private refusedKey = '';
  private exhaustedKey: string | undefined;
  private routeTimer?: NodeJS.Timeout;
  /** Node Event message → when it was last sent (nodeEvent). */
  private readonly eventSent = new Map<string, number>();

  constructor(private readonly rt: NetworkRuntime, private readonly cfg: Config, private readonly stateDir: string, private readonly api: KubeApi) {
    this.peers = new PeerNetwork(rt.host, cfg);
    this.probe = new PeerProbe(() => cfg.peerProbe, `kni ${cfg.kubernetes.nodeName}`, () => rt.node.mtu);
    answerPeerProbe(this.probe, rt, () => this.peers.status(), (reason, message, type) => this.nodeEvent(reason, message, type));
    this.writer = new NodeStatusWriter(api, cfg.kubernetes.nodeName);
    this.owners = new ExtensionOwners(api, rt.extensions, cfg);
    const ranges = new ServiceCidrs(api);
    this.services = {
      holding: (family, value) => ranges.holding(family, value),
      behind: (family, ip) => serviceBehind(api, family, ip),
      withNodePort: (family, port) => serviceWithNodePort(api, family, port.port, port.protocol),
      addressesOf: (kind, namespace, name) => addressesOfNamed(api, kind, namespace, name),
      podAt: (ip, node) => podAtAddress(api, ip, node),
      policyLookup: () => this.policyVerdicts?.() ?? new PolicyLookup(api),
    };
  }

  get nodeName(): string {
    return this.cfg.kubernetes.nodeName;
  }

  start(): void {
    const { k8s, kc } = this.api;
    // resourceVersion "0": the list is served from the API server's watch cache, as client-go's
    // informers list, not read from etcd: every kni lists every Node when it starts and when
    // its watch re-lists, and in a large cluster each such read is the whole Node table.
    const informer = k8s.makeInformer(kc, '/api/v1/nodes', () => listNodes(this.api, '0'));
    this.informer = informer;
    // First: every later handler, and the cache, see the Node slimmed.
    informer.on('add', slimNode);
    informer.on('update', slimNode);
    const restart = new WatchRestart(informer, {
      resource: 'nodes',
      what: 'Node watch',
      describe: () => 'Node watch broke; starting it again (routes stay as they are)',
      onBroke: (error) => this.watchBroke(error),
      onConnected: () => this.markConnected(),
      maxMs: 10_000,
    });
    this.restart = restart;
    // A Node event means the watch delivers; its connect event comes before the list, so it
    // only asks for a sync from the cache. An update asks for one only when it changed what kni
    // routes by: a kubelet writes its Node's status every few minutes and at each condition's
    // change, several updates a second in a cluster of thousands of nodes.
    for (const verb of ['add', 'update'] as const) {
      informer.on(verb, (n) => {
        restart.connected();
        if (this.routingChanged(n)) this.schedule('difference');
      });
    }
    informer.on('delete', (n) => {
      restart.connected();
      const name = n.metadata?.name ?? '';
      this.ipamOf.delete(name);
      this.views.delete(name);
      this.changed.add(name);
      this.schedule('difference');
    });
    informer.on('connect', () => this.schedule());
    this.rt.onIpamChange(() => this.checkIpam());
    this.rt.node.onRepaired((what) => this.nodeEvent('NodeNetworkRepaired', `the node network was changed behind kni's back (${what}); kni set it up again`));
    // What works against the pods' networking on this node (knictl node's warnings), where an operator without a shell there looks.
    this.rt.node.onWarning((_key, text) => this.nodeEvent('NodeNetworkWarning', text));
    this.checkIpam();
    restart.begin();
    this.owners.start();
    // Routes go without a Node event: a link going down takes the routes through it along, and
    // an admin or another agent may delete them. Checked as often as flannel checks its own (each
    // of CHECK_SLICES every 10 s, one every 2 s: no check reads all of a large cluster at once), and
    // at once when the kernel says a route of kni's went, or its vxlan device went or went down
    // (IPv4 drops the routes through a link set down without a notice of their own: kernel-notices.ts).
    this.routeTimer = setInterval(() => this.schedule('part'), ROUTE_CHECK_MS / CHECK_SLICES.length);
    this.routeTimer.unref();
    this.rt.notices.onNotices((n) => {
      // Routes kni deleted itself (a peer gone) are no news: only others' deletions are.
      const routes = n.routesDeleted.filter((r) => r.protocol === RTPROT_KNI && !(r.destination && this.peers.deletedItself(r.destination))).length;
      const vxlan = n.linksDeleted.includes(this.cfg.vxlan.device) || n.linksDown.includes(this.cfg.vxlan.device);
      if (!this.cfg.repairOnNotice || !(n.lost || routes || vxlan)) return;
      log('info', "the kernel says a route of kni's was deleted, or its vxlan device deleted or set down: checking the routes to other nodes' pods now", { routes, lost: n.lost });
      this.schedule();
    });
    // On kni0's gateways once the node network is up, through kni's installed routes; not for a CNI default network, whose gateways are its plugins'.
    const probing = (): boolean => !this.rt.cni && this.rt.node.status().ready;
    // The targets made again only when a peer's routes changed: a round at 5,000 peers that made
    // its 10,000 targets and the list of statuses held the event loop ≈ 45 ms.
    let made: { key: string; targets: Promise<ProbeTarget[]> } | undefined;
    const targets = (): Promise<ProbeTarget[]> => {
      const key = `${this.peers.summary().version} ${this.cfg.ranges.map((c) => c.text)}`;
      if (made?.key !== key) made = { key, targets: probeTargets(this.peers.status(), this.cfg.ranges) };
      return made.targets;
    };
    this.probe.start(() => (probing() ? this.cfg.ranges.map(gatewayOf) : []), () => (probing() ? targets() : []));
    this.rt.node.onReady(() => this.probe.nodeReady());
  }

  stop(): void {
    this.stopped = true;
    this.restart?.stop();
    if (this.syncTimer) clearTimeout(this.syncTimer);
    this.owners.stop();
    if (this.routeTimer) clearInterval(this.routeTimer);
    this.probe.stop();
    this.writer.stop();
  }

  /** Routes again from the cache (the backend changed live); the probe with its settings now. */
  resync(): void {
    this.schedule();
    this.probe.restart();
  }

  private markConnected(): void {
    if (this.connected) return;
    if (!this.restart?.restarts) log('info', 'watching Nodes', { api: this.api.source });
    this.connected = true;
    apiConnected.set(1);
    this.schedule();
  }

  /** Whether a Node's name, InternalIPs, podCIDRs or kni's annotation on it changed (or it is new). */
  private routingChanged(n: K8s.V1Node): boolean {
    let view = nodeView(n);
    const ipam = n.metadata?.annotations?.[NODE_IPAM_ANNOTATION];
    const was = this.views.get(view.name);
    // A status update keeps the view its routes were planned for, and the Node the strings of
    // that view: one copy of them per Node, not one more per update.
    if (was && was !== view && sameRouting(was, view)) {
      cachedViews.set(n, (view = was));
      shareRouting(n, was);
    }
    const same = was === view && this.ipamOf.get(view.name) === ipam;
    this.views.set(view.name, view);
    if (ipam === undefined) this.ipamOf.delete(view.name);
    else this.ipamOf.set(view.name, ipam);
    if (!same) this.changed.add(view.name);
    return !same;
  }

  private watchBroke(error: string): void {
    this.connected = false;
    apiConnected.set(0);
    if (!this.cfg.ranges.length) this.rt.node.waitForRanges(`waiting for the pod ranges of Node ${this.nodeName}: cannot read it from the API server (${error})`);
  }

  private schedule(check: 'all' | 'part' | 'difference' = 'all'): void {
    const rank = { difference: 0, part: 1, all: 2 };
    if (rank[check] > rank[this.nextCheck]) this.nextCheck = check;
    if (this.syncTimer || this.stopped) return;
    this.syncTimer = setTimeout(() => {
      this.syncTimer = undefined;
      void this.sync();
    }, 50);
  }

  private async sync(): Promise<void> {
    if (this.syncing) {
      this.syncAgain = true;
      return;
    }
    this.syncing = true;
    try {
      const self = this.informer?.get(this.nodeName);
      if (self) await this.ownNode(self);
      else this.rt.node.waitForRanges(`waiting for Node ${this.nodeName} to be registered`);
      // A CNI default network's pods live in the Node's podCIDRs too: kni routes to the other
      // nodes' as for its own network (backend none leaves that to the plugins).
      if (!self || (!this.cfg.ranges.length && !this.rt.cni)) return;
      const next = this.nextCheck;
      this.nextCheck = 'difference';
      // A full check starts from the cache itself (a relist's, say); a Node event's sync looks at the Nodes it changed.
      if (next === 'all') {
        this.views.clear();
        for (const n of this.informer?.list() ?? []) this.views.set(n.metadata?.name ?? '', nodeView(n));
        this.unrouted.clear();
      }
      const changed = this.changed;
      this.changed = new Set();
      for (const name of next === 'all' ? this.views.keys() : changed) {
        if (name !== this.nodeName && this.views.get(name)?.podCidrs.length === 0) this.unrouted.add(name);
        else this.unrouted.delete(name);
      }
      if (next === 'all' || changed.size) this.rt.node.warn('unrouted-peers', unroutedPeersWarning([...this.unrouted], this.views.size - 1, !this.cfg.rangesFromNode && !this.rt.cni));
      const started = performance.now();
      this.peers.apply(nodeView(self), this.views, next === 'part' ? CHECK_SLICES[this.part++ % CHECK_SLICES.length] : next, changed);
      // A bulk join is written a slice at a time: the rest goes on at the next turn.
      if (this.peers.pendingWrites()) this.schedule('difference');
      // On the event loop: what it costs grows with the cluster (docs/node-agent.md, "At scale").
      stepSeconds.of('peers.sync').observe((performance.now() - started) / 1000);
      const restored = this.peers.restored.map((r) => `${r.destination} (node ${r.node})`);
      if (restored.length) {
        this.rt.node.recordRepair(`routes to other nodes' pods were gone from the kernel; installed again: ${restored.join(', ')}`);
        this.nodeEvent('PeerRoutesRestored', `routes to other nodes' pods were gone from the kernel (a link went down, or someone deleted them); kni installed them again: ${restored.join(', ')}`);
      }
      // Traffic to other nodes' pods keeps its source address; a podCIDR refused as a route (a
      // default route, say) must not switch masquerading off for what it covers either.
      const routed = this.peers.routedChange();
      await this.rt.node.setPeerCidrs(routed.cidrs, routed).catch((e) => log('error', 'cannot update the masquerade exclusions', { error: (e as Error).message }));
      this.report(this.views.size - 1);
    } catch (e) {
      log('error', 'node agent sync failed', { error: (e as Error).message });
    } finally {
      this.syncing = false;
      if (this.syncAgain) {
        this.syncAgain = false;
        // What was asked for meanwhile is in nextCheck already (a Node event's difference, say):
        // not a full check of every peer for it.
        this.schedule('difference');
      }
    }
  }

  /** This node's pod ranges from its Node: adopted, or a change refused while pods use them. */
  private async ownNode(node: K8s.V1Node): Promise<void> {
    if (!this.cfg.rangesFromNode) return;
    let cidrs: Cidr[];
    try {
      cidrs = podCidrsOfNode(node);
    } catch (e) {
      this.refuse(node, `Node ${this.nodeName} has unusable spec.podCIDRs: ${(e as Error).message}`);
      return;
    }
    this.nodePodCidrs = cidrs.map((c) => c.text);
    this.podCidrsSource = nodePodCidrSource(node);
    if (!cidrs.length) {
      const pool = this.cfg.nodeIpam.clusterCIDRs;
      this.rangesProblem = pool.length
        ? (this.claimProblem || `Node ${this.nodeName} has no spec.podCIDRs: kni's nodeIpam is handing it blocks of ${pool.map((c) => c.text).join(',')}`)
        : `Node ${this.nodeName} has no spec.podCIDRs yet (is node IPAM on: kube-controller-manager --allocate-node-cidrs? Else set nodeIpam in kni's config)`;
      if (!this.cfg.ranges.length) this.rt.node.waitForRanges(`waiting for pod ranges: ${this.rangesProblem}`);
      if (pool.length) this.claimCidrs();
      return;
    }
    if (sameRanges(cidrs, this.cfg.ranges)) {
      this.rangesProblem = '';
      if (!this.rt.node.status().ready) await this.rt.node.adoptRanges(cidrs).catch((e) => log('error', 'node network setup failed', { error: (e as Error).message }));
      return;
    }
    if (this.cfg.ranges.length && this.rt.podCount() > 0) {
      this.refuse(node, `Node ${this.nodeName} spec.podCIDRs changed to ${this.nodePodCidrs.join(',')} while ${this.rt.podCount()} pod(s) hold addresses from ${this.cfg.ranges.map((c) => c.text).join(',')}: not applied (kni keeps its ranges; drain the node and restart kni to take the new ones)`);
      return;
    }
    try {
      writeRangesFile(this.stateDir, cidrs, this.nodeName);
      await this.rt.node.adoptRanges(cidrs);
      this.rangesProblem = '';
    } catch (e) {
      this.refuse(node, `cannot take pod ranges ${this.nodePodCidrs.join(',')} from Node ${this.nodeName}: ${(e as Error).message}`);
    }
  }

  /**
   * Blocks from nodeIpam for this Node, once at a time: recorded in the pool's ConfigMap, then
   * written on the Node, whose update brings them back through ownNode. Tried again every 5 s.
   */
  private claimCidrs(): void {
    if (this.claiming || this.stopped) return;
    this.claiming = true;
    let preferred: Cidr[] = [];
    try {
      preferred = readRangesFile(this.stateDir) ?? [];
    } catch {
      // unreadable: no preference
    }
    void claimNodeCidrs(this.api, this.cfg.nodeIpam, this.nodeName, preferred)
      .then(async (blocks) => {
        await setNodePodCidrs(this.api, this.nodeName, blocks);
        this.claimProblem = '';
        log('info', 'pod ranges claimed from nodeIpam', { node: this.nodeName, ranges: blocks.map((b) => b.text), configMap: this.cfg.nodeIpam.configMap });
      })
      .catch((e) => {
        this.claimProblem = `cannot claim pod ranges from nodeIpam: ${apiError(e)}`;
        log('error', 'cannot claim pod ranges from nodeIpam; trying again in 5 s', { node: this.nodeName, error: apiError(e) });
        const retry = setTimeout(() => this.schedule(), 5000);
        retry.unref();
      })
      .finally(() => {
        this.claiming = false;
      });
  }

  private refuse(node: K8s.V1Node, message: string): void {
    this.rangesProblem = message;
    if (!this.cfg.ranges.length) this.rt.node.waitForRanges(message);
    if (this.refusedKey === message) return;
    this.refusedKey = message;
    log('error', 'pod range change refused', { node: this.nodeName, message });
    void recordEvent(this.api, { kind: 'Node', name: this.nodeName, uid: node.metadata?.uid }, 'Warning', 'PodCIDRChangeRefused', message);
  }

  /**
   * A Warning Event on this node's Node (kubectl describe node): what kni found undone on the
   * node and put back. The same message at most once in 10 minutes (something that keeps
   * undoing kni's work would otherwise write an Event a minute; kni_drift_findings_total counts
   * every one).
   */
  private nodeEvent(reason: string, message: string, type: 'Warning' | 'Normal' = 'Warning'): void {
    const now = Date.now();
    if (now - (this.eventSent.get(message) ?? -Infinity) < 10 * 60_000) return;
    this.eventSent.set(message, now);
    for (const [m, at] of this.eventSent) if (now - at >= 10 * 60_000) this.eventSent.delete(m);
    const self = this.informer?.get(this.nodeName);
    void recordEvent(this.api, { kind: 'Node', name: this.nodeName, uid: self?.metadata?.uid }, type, reason, message);
  }

  /** NetworkUnavailable False once every peer route is in place; metrics. */
  private report(peerCount: number): void {
    peerNodes.set(peerCount);
    const node = this.rt.node.status();
    const ready = node.ready;
    // Counted as the peers change (PeerNetwork.summary): a sync after one Node event costs that Node.
    const { counts, bad: badSet, version } = this.peers.summary();
    const key = `${version} ${ready} ${ready ? '' : node.reason}`;
    if (key === this.reported) return;
    this.reported = key;
    peerRoutes.reset();
    for (const [k, n] of counts) {
      const [backend, state] = k.split(' ');
      peerRoutes.set({ backend, state }, n);
    }
    this.writer.setCondition(
      ready && !badSet.size
        ? { type: 'NetworkUnavailable', status: 'False', reason: 'KniRoutesCreated', message: "kni: node network set up, routes to every other node's pods in place" }
        : {
            type: 'NetworkUnavailable',
            status: 'True',
            reason: 'KniRoutesMissing',
            message: ready ? noRouteMessage(badSet) : `kni: node network not ready: ${node.reason}`,
          },
    );
  }

  /** IPAMExhausted condition and taint follow the ranges: set when one is full, gone when not. */
  private checkIpam(): void {
    const full = this.rt.ipamStatus().filter((r) => r.exhausted).map((r) => r.cidr);
    const key = full.join(',');
    if (key === this.exhaustedKey) return;
    this.exhaustedKey = key;
    this.writer.setCondition(
      full.length
        ? { type: IPAM_EXHAUSTED_CONDITION, status: 'True', reason: 'PodRangeExhausted', message: `pod range ${key} has no free address: new pods go to other nodes (running pods are untouched)` }
        : { type: IPAM_EXHAUSTED_CONDITION, status: 'False', reason: 'PodRangeAvailable', message: 'every pod range has free addresses' },
    );
    this.writer.setTaint(full.length > 0);
  }

  status(): AgentStatus {
    const routes = this.peers.status();
    const byNode = new Map<string, PeerView['routes']>();
    for (const route of routes) {
      const r = { ...route, probe: this.probe.result(route.destination) };
      const of = byNode.get(r.node);
      if (of) of.push(r);
      else byNode.set(r.node, [r]);
    }
    const peers = (this.informer?.list() ?? []).map(nodeView).filter((v) => v.name !== this.nodeName).map((v) => ({ ...v, routes: byNode.get(v.name) ?? [] }));
    return {
      nodeName: this.nodeName,
      nodePodCidrs: this.nodePodCidrs,
      podCidrsSource: this.podCidrsSource,
      ranges: this.cfg.ranges.map((c) => c.text),
      rangesProblem: this.rangesProblem,
      backend: this.cfg.backend,
      api: { source: this.api.source, connected: this.connected, error: this.restart?.lastError ?? '', watchRestarts: this.restart?.restarts ?? 0 },
      peers,
    };
  }
}
