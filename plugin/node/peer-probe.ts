// Whether each peer's pod network answers (knictl node, Trace, kni_peer_probes): kni on
// every node listens on its pods' gateway addresses, and connects to every other node's through
// kni's route to its pods, from its own gateway address, so the packets go as pods' do (the
// vxlan or host-gw route there, the peer's route to this node's pods back). A route installed
// but silent is what a firewall dropping vxlan's UDP, or a router dropping pod addresses, looks
// like — when everything else on kni's side says fine. A TCP connection, not ICMP: Node has no
// ICMP socket, and a ping socket needs net.ipv4.ping_group_range opened.
import net from 'node:net';
import { log } from '../core/log';
import type { PeerProbeConfig } from '../core/config';
import { Cidr, parseCidr } from '../ipam/ip';
import { peerProbes } from '../observe/metrics';
import { gatewayOf, PeerRouteStatus } from './peer-routes';

/**
 * answers: the peer's kni took the connection; refused: a reset came back (the path works, no
 * kni listens there: probing off, an older kni, or one restarting); silent: no answer in time; unreachable: the
 * kernel here has no way there (an ICMP error, or no route).
 */
export type ProbeState = 'answers' | 'refused' | 'silent' | 'unreachable';

export interface ProbeResult {
  state: ProbeState;
  /** Why, for silent and unreachable. */
  detail: string;
  /** When the state began (ISO time), and the last probe's round trip (connect) in ms. */
  since: string;
  ms: number;
}

export interface ProbeTarget {
  /** The peer's pod CIDR the route goes to (the result's key). */
  destination: string;
  /** The peer's gateway address in it, and this node's own of the same family. */
  address: string;
  source: string;
}

export const probeWorks = (s: ProbeState): boolean => s === 'answers' || s === 'refused';

/** The peers' gateways through kni's installed routes, each from this node's own gateway of that family. */
export function probeTargets(routes: PeerRouteStatus[], ranges: Cidr[]): ProbeTarget[] {
  const out: ProbeTarget[] = [];
  for (const r of routes) {
    if (r.state !== 'installed') continue;
    const c = parseCidr(r.destination);
    const own = ranges.find((x) => x.family === c.family);
    if (own) out.push({ destination: r.destination, address: gatewayOf(c), source: gatewayOf(own) });
  }
  return out;
}

/** Connections open at once in a round: a node with a thousand peers spreads them. */
const AT_ONCE = 32;

export class PeerProbe {
  private readonly servers = new Map<string, net.Server>();
  private readonly results = new Map<string, ProbeResult>();
  private readonly failedListens = new Set<string>();
  private timer?: NodeJS.Timeout;
  private running = false;
  private sources?: { own: () => string[]; targets: () => ProbeTarget[] };
  /** Told when a target stops answering, or answers again (the node agent's Node Events). */
  onChange?: (target: ProbeTarget, now: ProbeResult) => void;

  /** settings: read at each start (peerProbe changes live). */
  constructor(private readonly settings: () => PeerProbeConfig, private readonly greeting: string) {}

  /** Every interval: listens on this node's gateways (`own`, when its network is up) and probes the targets; nothing with port 0. */
  start(own: () => string[], targets: () => ProbeTarget[]): void {
    this.sources = { own, targets };
    const { port, intervalSeconds } = this.settings();
    if (!port) return;
    const round = async (): Promise<void> => {
      if (this.running) return;
      this.running = true;
      try {
        this.listen(own());
        await this.probeAll(targets());
      } finally {
        this.running = false;
      }
    };
    this.timer = setInterval(() => void round(), intervalSeconds * 1000);
    this.timer.unref();
    void round();
  }

  private get port(): number {
    return this.settings().port;
  }

  private get timeoutMs(): number {
    return this.settings().timeoutSeconds * 1000;
  }

  /** Stopped and started again with the settings as they are now (a live ConfigMap change). */
  restart(): void {
    this.stop();
    this.results.clear();
    if (this.sources) this.start(this.sources.own, this.sources.targets);
  }

  /** Listens on each of these addresses not yet listened on (the gateways come with the node network). */
  listen(addresses: string[]): void {
    for (const address of addresses) {
      if (this.servers.has(address)) continue;
      const server = net.createServer((s) => {
        s.on('error', () => undefined);
        s.end(this.greeting);
      });
      this.servers.set(address, server);
      server.on('error', (e: NodeJS.ErrnoException) => {
        this.servers.delete(address);
        server.close();
        // Once per address: retried every round until the address is there (kni0 set up).
        if (!this.failedListens.has(address)) log('warn', 'peer probe cannot listen; retried each round', { address, port: this.port, error: e.code ?? e.message });
        this.failedListens.add(address);
      });
      server.listen({ host: address, port: this.port }, () => this.failedListens.delete(address));
    }
  }

  /** One round: every target probed, AT_ONCE at a time; the results of destinations no longer targets dropped. */
  async probeAll(targets: ProbeTarget[]): Promise<void> {
    const keep = new Set(targets.map((t) => t.destination));
    for (const k of this.results.keys()) if (!keep.has(k)) this.results.delete(k);
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < targets.length) await this.probe(targets[next++]);
    };
    await Promise.all(Array.from({ length: Math.min(AT_ONCE, targets.length) }, worker));
    const counts = new Map<ProbeState, number>([['answers', 0], ['refused', 0], ['silent', 0], ['unreachable', 0]]);
    for (const r of this.results.values()) counts.set(r.state, counts.get(r.state)! + 1);
    for (const [state, n] of counts) peerProbes.set({ state }, n);
  }

  result(destination: string): ProbeResult | undefined {
    return this.results.get(destination);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    for (const s of this.servers.values()) s.close();
    this.servers.clear();
  }

  private async probe(t: ProbeTarget): Promise<void> {
    const started = performance.now();
    const outcome = await new Promise<{ state: ProbeState; detail: string }>((resolve) => {
      const sock = net.connect({ host: t.address, port: this.port, localAddress: t.source, timeout: this.timeoutMs });
      const done = (state: ProbeState, detail = ''): void => {
        sock.destroy();
        resolve({ state, detail });
      };
      sock.once('connect', () => done('answers'));
      sock.once('timeout', () => done('silent', `no answer from ${t.address} port ${this.port} within ${this.timeoutMs / 1000} s`));
      sock.once('error', (e: NodeJS.ErrnoException) => {
        // A reset, before or after the handshake (a peer's kni restarting closes its listener): the path works.
        if (e.code === 'ECONNREFUSED' || e.code === 'ECONNRESET') done('refused');
        else if (e.code === 'EHOSTUNREACH' || e.code === 'ENETUNREACH') done('unreachable', `${t.address}: ${e.code === 'EHOSTUNREACH' ? 'host' : 'network'} unreachable`);
        else done('silent', `${t.address} port ${this.port}: ${e.code ?? e.message}`);
      });
    });
    const before = this.results.get(t.destination);
    const changed = !before || before.state !== outcome.state;
    this.results.set(t.destination, { ...outcome, since: changed ? new Date().toISOString() : before.since, ms: Math.round((performance.now() - started) * 100) / 100 });
    if (!changed) return;
    const works = probeWorks(outcome.state);
    if (!works) log('warn', "a peer's pod network does not answer kni's probe through kni's route", { destination: t.destination, address: t.address, state: outcome.state, detail: outcome.detail });
    else if (before && !probeWorks(before.state)) log('info', "a peer's pod network answers kni's probe again", { destination: t.destination, address: t.address });
    if (!works || (before && !probeWorks(before.state))) this.onChange?.(t, this.results.get(t.destination)!);
  }
}
