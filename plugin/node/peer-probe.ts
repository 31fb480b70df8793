// Whether each peer's pod network answers (knictl node, Trace, kni_peer_probes): kni on
// every node listens on its pods' gateway addresses, and connects to every other node's through
// kni's route to its pods, from its own gateway address, so the packets go as pods' do (the
// vxlan or host-gw route there, the peer's route to this node's pods back). A route installed
// but silent is what a firewall dropping vxlan's UDP, or a router dropping pod addresses, looks
// like — when everything else on kni's side says fine. A TCP connection, not ICMP: Node has no
// ICMP socket, and a ping socket needs net.ipv4.ping_group_range opened.
//
// The listener answers with more than a full-sized packet, each segment as large as its pods'
// MTU allows (TCP_MAXSEG): a path that passes the handshake but loses large packets (an MTU
// black hole: a link between the nodes narrower than theirs, and the ICMP "too big" lost or
// never sent, or fragments dropped) is then told apart from one that works. Pods there connect,
// and hang on their first large answer: the hardest of these to see from inside a pod.
import net from 'node:net';
import { log } from '../core/log';
import { loopTurns } from '../core/loop-turns';
import { IPPROTO_TCP, setsockoptInt, TCP_MAXSEG } from '../sys/libc';
import type { PeerProbeConfig } from '../core/config';
import { Cidr, parseCidr } from '../ipam/ip';
import { peerProbes } from '../observe/metrics';
import { DeliveryAnswer, DELIVER_REQUEST } from './peer-delivery';
import { gatewayOf, PeerRouteStatus } from './peer-routes';

/**
 * answers: the peer's kni took the connection and its answer arrived; refused: a reset came back
 * (the path works, no kni listens there: probing off, an older kni, or one restarting);
 * small-only: connected, but the answer's full-sized packets did not arrive in time; silent: no
 * answer in time; unreachable: the kernel here has no way there (an ICMP error, or no route).
 */
export type ProbeState = 'answers' | 'refused' | 'small-only' | 'silent' | 'unreachable';
export const PROBE_STATES: ProbeState[] = ['answers', 'refused', 'small-only', 'silent', 'unreachable'];

/**
 * What a listening kni sends in all: its greeting line says so ("bytes=N"), padding makes up the
 * rest. More than one segment at any MTU up to 9000 (jumbo frames), and within the initial
 * congestion window (10 segments) at any MTU from 1280: all of it leaves at once.
 */
export const PROBE_BYTES = 9216;

/**
 * The answer a listener sends: the greeting line with the byte count, then padding to
 * PROBE_BYTES. Written in two parts (the line, then the rest): the line leaves in a small segment
 * of its own, so a prober that got nothing at all knows it was the kni there that did not answer
 * (busy, stuck), not the path that lost the large packets.
 */
export function probeAnswer(greeting: string): Buffer {
  const head = Buffer.from(`${greeting.trimEnd()} bytes=${PROBE_BYTES}\n`);
  if (head.length > PROBE_BYTES) throw new Error(`probe greeting over ${PROBE_BYTES} bytes`);
  return Buffer.concat([head, Buffer.alloc(PROBE_BYTES - head.length, '.')]);
}

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

/** A target that stopped answering in a round, or answers again. */
export interface ProbeChange {
  target: ProbeTarget;
  now: ProbeResult;
}

export const probeWorks = (s: ProbeState): boolean => s === 'answers' || s === 'refused';

/** What small-only means, and what to do about it (the node Event's and the trace's words). */
export const LARGE_PACKETS_LOST = "small packets pass between the nodes and full-sized ones are lost, an MTU black hole: a link between them takes less than this node's pods' MTU (plus the overlay's header), and the ICMP saying so does not come back, or fragments are dropped; pods connect and then hang on large transfers. Set mtu in kni's config to what the path takes (less 50 bytes with vxlan), or let that ICMP through";

/**
 * The peers' gateways through kni's installed routes, each from this node's own gateway of that
 * family. Made a slice at a time: at 5,000 peers during a bulk join (every status new), this
 * pass and the round's start took ≈ 90 ms of one turn of the event loop in a CPU profile of
 * bench:scale. A destination's gateway is a function of its text: any pass may keep it.
 */
export async function probeTargets(routes: readonly PeerRouteStatus[], ranges: Cidr[]): Promise<ProbeTarget[]> {
  const out: ProbeTarget[] = [];
  const sources = new Map(ranges.map((c) => [c.family, gatewayOf(c)]));
  const known = gateways;
  const now = new Map<string, { family: Cidr['family']; address: string }>();
  const turn = loopTurns(SLICE_MS);
  for (const r of routes) {
    const t = turn();
    if (t) await t;
    if (r.state !== 'installed') continue;
    let target = known.get(r.destination) ?? now.get(r.destination);
    if (!target) {
      const c = parseCidr(r.destination);
      target = { family: c.family, address: gatewayOf(c) };
    }
    now.set(r.destination, target);
    const source = sources.get(target.family);
    if (source) out.push({ destination: r.destination, address: target.address, source });
  }
  gateways = now;
  return out;
}

/** Each installed route's gateway by destination, kept while it is one (a round at 5,000 peers parsed 10,000 CIDRs, 50–90 ms). */
let gateways = new Map<string, { family: Cidr['family']; address: string }>();
/** How long a pass over every target holds the event loop before it lets it turn. */
const SLICE_MS = 5;

/** How long a listener waits for a request line before taking the connection for a probe (a kni before the line sends none). */
const REQUEST_WAIT_MS = 200;
const MAX_REQUEST = 512;

/** Connections open at once in a round: a node with a thousand peers spreads them. */
const AT_ONCE = 32;

/**
 * What one listener takes. Only other nodes' kni reach it (node-guards.ts drops the rest in the
 * kernel), and each opens one connection a round; the bounds hold even if the guard is flushed
 * by someone: at most MAX_CONNECTIONS descriptors per listening address (the kernel's 4,096 or
 * more stay for kni's gRPC, CNI and NRI sockets), each closed once answered or after
 * CONNECTION_DEADLINE_MS whatever it sends, and a refusal logged at most once a minute.
 */
export const MAX_CONNECTIONS = 64;
export const CONNECTION_DEADLINE_MS = 5000;
const REFUSAL_LOG_MS = 60_000;

export class PeerProbe {
  private readonly servers = new Map<string, net.Server>();
  private readonly results = new Map<string, ProbeResult>();
  private readonly failedListens = new Set<string>();
  private timer?: NodeJS.Timeout;
  private running = false;
  private sources?: { own: () => string[]; targets: () => ProbeTarget[] | Promise<ProbeTarget[]> };
  /** Told after each round of the targets that stopped answering in it, or answer again (the node agent's Node Events). */
  onChanges?: (changes: ProbeChange[]) => void;
  /** Answers another node's kni asking how this node delivers to an address (peer-delivery.ts); `from`: its address. */
  onDeliver?: (destination: string, from: string) => Promise<DeliveryAnswer>;

  /** probeAnswer's greeting line, and the rest. */
  private readonly answer: [Buffer, Buffer];

  /**
   * settings: read at each start (peerProbe changes live). podMtu: this node's pods' MTU, which
   * the listener's segments are cut to (0: the route's, as for any connection).
   */
  constructor(private readonly settings: () => PeerProbeConfig, greeting: string, private readonly podMtu: () => number = () => 0) {
    const answer = probeAnswer(greeting);
    const line = answer.indexOf(0x0a) + 1;
    this.answer = [answer.subarray(0, line), answer.subarray(line)];
  }

  /** Every interval: listens on this node's gateways (`own`, when its network is up) and probes the targets; nothing with port 0. */
  start(own: () => string[], targets: () => ProbeTarget[] | Promise<ProbeTarget[]>): void {
    this.sources = { own, targets };
    const { port, intervalSeconds } = this.settings();
    if (!port) return;
    const round = async (): Promise<void> => {
      if (this.running) return;
      this.running = true;
      try {
        this.listen(own());
        await this.probeAll(await targets());
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

  /** The node network is up: listen on its gateways now, not at the next round (peers and their traces ask from then on). */
  nodeReady(): void {
    if (this.sources && this.port) this.listen(this.sources.own());
  }

  /** Listens on each of these addresses not yet listened on (the gateways come with the node network). */
  listen(addresses: string[]): void {
    for (const address of addresses) {
      if (this.servers.has(address)) continue;
      const server = net.createServer((s) => this.serve(s));
      // Past the cap Node accepts and closes at once: the descriptor is not kept.
      server.maxConnections = MAX_CONNECTIONS;
      server.on('drop', (d?: { remoteAddress?: string }) => this.refused(address, d?.remoteAddress));
      this.servers.set(address, server);
      server.on('error', (e: NodeJS.ErrnoException) => {
        this.servers.delete(address);
        server.close();
        // Once per address: retried every round until the address is there (kni0 set up).
        if (!this.failedListens.has(address)) log('warn', 'peer probe cannot listen; retried each round', { address, port: this.port, error: e.code ?? e.message });
        this.failedListens.add(address);
      });
      server.listen({ host: address, port: this.port }, () => {
        this.failedListens.delete(address);
        this.clampSegments(server, address);
      });
    }
  }

  /**
   * One connection: a request line (`probe`, or `deliver <address>` from another node's kni
   * tracing: peer-delivery.ts), answered; none within REQUEST_WAIT_MS (a kni before the request
   * line) is a probe. Anything else closes it.
   */
  private sendAnswer(s: net.Socket): void {
    s.write(this.answer[0]);
    s.end(this.answer[1]);
  }

  private lastRefusal = 0;
  private refusedSince = 0;

  /** A connection over the cap, closed: logged once a minute with how many were since. */
  private refused(address: string, from?: string): void {
    this.refusedSince++;
    const now = Date.now();
    if (now - this.lastRefusal < REFUSAL_LOG_MS) return;
    log('warn', `peer probe: ${MAX_CONNECTIONS} connections open on ${address} already; new ones are closed at once (logged once a minute)`, { address, port: this.port, from, refused: this.refusedSince });
    this.lastRefusal = now;
    this.refusedSince = 0;
  }

  private serve(s: net.Socket): void {
    s.on('error', () => undefined);
    // Whatever the other end does (sends nothing, never reads the answer): closed by then.
    const deadline = setTimeout(() => s.destroy(), CONNECTION_DEADLINE_MS);
    s.once('close', () => clearTimeout(deadline));
    let buffered = '';
    let asked = false;
    const idle = setTimeout(() => {
      asked = true;
      this.sendAnswer(s);
    }, REQUEST_WAIT_MS);
    s.on('data', (c: Buffer) => {
      if (asked) return;
      buffered += c.toString('latin1');
      const nl = buffered.indexOf('\n');
      if (nl < 0) {
        if (buffered.length > MAX_REQUEST) s.destroy();
        return;
      }
      asked = true;
      clearTimeout(idle);
      const line = buffered.slice(0, nl);
      if (line === 'probe') return void this.sendAnswer(s);
      if (!line.startsWith(DELIVER_REQUEST) || !this.onDeliver) return void s.destroy();
      const reply = (o: object): void => void s.end(`${JSON.stringify(o)}\n`);
      this.onDeliver(line.slice(DELIVER_REQUEST.length), s.remoteAddress ?? '').then(reply, (e: Error) => reply({ error: e.message }));
    });
    s.once('close', () => clearTimeout(idle));
  }

  /**
   * The listener's segments no larger than a pod's here (accepted connections inherit the
   * clamp): the answer's packets are then as large as the pods' own, whatever the route's MTU.
   */
  private clampSegments(server: net.Server, address: string): void {
    const mtu = this.podMtu();
    const fd = (server as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (!mtu || fd === undefined || fd < 0) return;
    const headers = net.isIPv6(address) ? 60 : 40;
    try {
      setsockoptInt(fd, IPPROTO_TCP, TCP_MAXSEG, mtu - headers);
    } catch (e) {
      log('warn', "peer probe: the listener's segment size not set; its answer goes in the route's", { address, mtu, error: (e as Error).message });
    }
  }

  /**
   * One round, AT_ONCE probes at a time, within 80 % of the interval: no probe starts after
   * that, so rounds never pile up however many peers stay silent (each taking the whole
   * timeout). A round begins with up to AT_ONCE of the targets whose last verdict was not an
   * answer (a recovery shows soon), then goes on through every target from where the last round
   * stopped, so each is reached within ⌈targets ÷ probes a round⌉ rounds. The results of
   * destinations no longer targets are dropped.
   */
  async probeAll(targets: ProbeTarget[]): Promise<void> {
    // The same list as last round (no peer changed): no result to forget.
    const turn = loopTurns(SLICE_MS);
    if (targets !== this.lastTargets) {
      const keep = new Set<string>();
      for (const t of targets) {
        keep.add(t.destination);
        const w = turn();
        if (w) await w;
      }
      for (const k of this.results.keys()) if (!keep.has(k)) this.results.delete(k);
      this.lastTargets = targets;
    }
    const deadline = performance.now() + this.settings().intervalSeconds * 800;
    const failing: ProbeTarget[] = [];
    for (const t of targets) {
      const r = this.results.get(t.destination);
      if (r !== undefined && r.state !== 'answers') failing.push(t);
      const w = turn();
      if (w) await w;
    }
    // The failing first (AT_ONCE of them, on from where the last round stopped), then every
    // target in turn from where the rotation stopped.
    const first = Array.from({ length: Math.min(AT_ONCE, failing.length) }, (_, i) => failing[(this.failingCursor + i) % failing.length]);
    const total = first.length + targets.length;
    const at = (i: number): ProbeTarget => (i < first.length ? first[i] : targets[(this.cursor + i - first.length) % targets.length]);
    const done = new Set<string>();
    let next = 0;
    let fromRotation = 0;
    const changes: ProbeChange[] = [];
    const worker = async (): Promise<void> => {
      while (next < total && performance.now() < deadline) {
        const i = next++;
        const t = at(i);
        if (i >= first.length) fromRotation++;
        if (done.has(t.destination)) continue;
        done.add(t.destination);
        await this.probe(t, changes);
      }
    };
    await Promise.all(Array.from({ length: Math.min(AT_ONCE, total) }, worker));
    this.failingCursor += first.length;
    this.cursor = targets.length ? (this.cursor + fromRotation) % targets.length : 0;
    if (changes.length) this.onChanges?.(changes);
    const counts = new Map<ProbeState, number>(PROBE_STATES.map((st) => [st, 0]));
    for (const r of this.results.values()) counts.set(r.state, counts.get(r.state)! + 1);
    for (const [state, n] of counts) peerProbes.set({ state }, n);
  }

  /** Where the rotation through every target, and through the failing ones, goes on next round. */
  private cursor = 0;
  private lastTargets?: ProbeTarget[];
  private failingCursor = 0;

  result(destination: string): ProbeResult | undefined {
    return this.results.get(destination);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    for (const s of this.servers.values()) s.close();
    this.servers.clear();
  }

  private async probe(t: ProbeTarget, changes: ProbeChange[]): Promise<void> {
    const started = performance.now();
    let ms = -1;
    // undefined: no verdict (connected, and the kni there sent nothing at all: busy or stuck).
    const outcome = await new Promise<{ state: ProbeState; detail: string } | undefined>((resolve) => {
      const sock = net.connect({ host: t.address, port: this.port, localAddress: t.source });
      let got = 0;
      let head = '';
      let expected: number | undefined;
      const done = (state: ProbeState | undefined, detail = ''): void => {
        clearTimeout(timer);
        sock.destroy();
        resolve(state && { state, detail });
      };
      const timer = setTimeout(() => {
        if (ms < 0) done('silent', `no answer from ${t.address} port ${this.port} within ${this.timeoutMs / 1000} s`);
        else if (got === 0) done(undefined);
        else done('small-only', `connected to ${t.address} port ${this.port}, but ${got} of the ${expected ?? PROBE_BYTES} bytes its kni sends back in full-sized packets arrived within ${this.timeoutMs / 1000} s`);
      }, this.timeoutMs);
      sock.once('connect', () => {
        ms = performance.now() - started;
        sock.write('probe\n');
      });
      sock.on('data', (c: Buffer) => {
        got += c.length;
        if (expected !== undefined || head.length > 512) return;
        head += c.toString('latin1', 0, Math.min(c.length, 512));
        const m = /^[^\n]* bytes=(\d+)\n/.exec(head);
        if (m) expected = Number(m[1]);
      });
      // A kni before the byte count sends its greeting alone: it answered.
      sock.once('end', () => (expected === undefined || got >= expected ? done('answers') : done('small-only', `connected to ${t.address} port ${this.port}, but the answer ended after ${got} of ${expected} bytes`)));
      sock.once('error', (e: NodeJS.ErrnoException) => {
        // A reset, before or after the handshake (a peer's kni restarting closes its listener): the path works.
        if (e.code === 'ECONNREFUSED' || e.code === 'ECONNRESET') done('refused');
        else if (e.code === 'EHOSTUNREACH' || e.code === 'ENETUNREACH') done('unreachable', `${t.address}: ${e.code === 'EHOSTUNREACH' ? 'host' : 'network'} unreachable`);
        else done('silent', `${t.address} port ${this.port}: ${e.code ?? e.message}`);
      });
    });
    if (!outcome) {
      log('info', "peer probe: connected, but the kni there sent nothing in time (busy or stuck there): no verdict this round", { destination: t.destination, address: t.address, timeoutSeconds: this.timeoutMs / 1000 });
      return;
    }
    const before = this.results.get(t.destination);
    const changed = !before || before.state !== outcome.state;
    // The connect's time (the answer's too, when it never connected).
    const took = ms >= 0 ? ms : performance.now() - started;
    this.results.set(t.destination, { ...outcome, since: changed ? new Date().toISOString() : before.since, ms: Math.round(took * 100) / 100 });
    if (!changed) return;
    const works = probeWorks(outcome.state);
    if (!works) log('warn', "a peer's pod network does not answer kni's probe through kni's route", { destination: t.destination, address: t.address, state: outcome.state, detail: outcome.detail });
    else if (before && !probeWorks(before.state)) log('info', "a peer's pod network answers kni's probe again", { destination: t.destination, address: t.address });
    if (!works || (before && !probeWorks(before.state))) changes.push({ target: t, now: this.results.get(t.destination)! });
  }
}
