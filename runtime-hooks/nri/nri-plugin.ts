// kni as an NRI plugin (containerd ≥ 1.7, CRI-O ≥ 1.26): RunPodSandbox attaches (or, when the
// CNI path already did, records what NRI adds), StopPodSandbox and RemovePodSandbox release,
// Synchronize releases what the runtime no longer has. As an external plugin it connects to
// the runtime's socket and reconnects with backoff; pre-registered, it gets its socket on fd 3.
import { nriConnected } from '../../plugin/observe/metrics';
import { withSpan } from '../../plugin/observe/tracing';
import net from 'node:net';
import { Duplex } from 'node:stream';
import { KniError } from '../../plugin/core/errors';
import { log } from '../../plugin/core/log';
import { NetworkRuntime } from '../../plugin/core/network-runtime';
import { Mux } from './mux';
import { decode, encode, EVENT_MASK, NriPod, PLUGIN_SERVICE, RUNTIME_SERVICE } from './nri-proto';
import { STATUS, TtrpcEndpoint, TtrpcError } from './ttrpc';

/** Decodes a request from the runtime; bytes that do not decode are its error (INVALID_ARGUMENT). */
function decodeRequest<T>(type: string, payload: Buffer): T {
  try {
    return decode<T>(type, payload);
  } catch (e) {
    throw new TtrpcError(STATUS.INVALID_ARGUMENT, `malformed ${type}: ${(e as Error).message}`);
  }
}

const PLUGIN_CONN = 1;
const RUNTIME_CONN = 2;
const REGISTER_TIMEOUT_MS = 5000;
const BACKOFF_MIN_MS = 250;
const BACKOFF_MAX_MS = 30_000;
/** A session must stay registered this long before the backoff starts again from the minimum. */
const STABLE_MS = 10_000;
/** Pod ids one Synchronize (all its "more" batches) may list: far above any node's pods. */
export const MAX_SYNC_PODS = 65_536;

export interface NriPluginOptions {
  socket: string;
  pluginName: string;
  pluginIndex: string;
  /** A sandbox attached this recently may be missing from a Synchronize list: never released by it. */
  syncGraceSeconds: number;
  /** An already connected socket (pre-registered plugin, fd 3); no reconnect then. */
  connected?: Duplex;
}

export type NriState = 'connecting' | 'registered' | 'disconnected' | 'stopped';

export class NriPlugin {
  state: NriState = 'connecting';
  private mux?: Mux;
  private stopped = false;
  private backoffMs = BACKOFF_MIN_MS;
  private syncPods: string[] = [];
  /** The one reconnect timer: a connection that fails in several ways still schedules one. */
  private retry?: NodeJS.Timeout;
  /** Connections made, for tests and metrics of reconnect behaviour. */
  connections = 0;

  constructor(private readonly rt: NetworkRuntime, private readonly opts: NriPluginOptions) {}

  start(): void {
    if (this.opts.connected) this.session(this.opts.connected);
    else this.connect();
  }

  stop(): void {
    this.stopped = true;
    this.setState('stopped');
    if (this.retry) clearTimeout(this.retry);
    this.retry = undefined;
    this.mux?.close();
  }

  private connect(): void {
    this.retry = undefined;
    if (this.stopped) return;
    this.setState('connecting');
    this.connections++;
    const sock = net.connect(this.opts.socket);
    sock.once('connect', () => this.session(sock));
    sock.on('error', (e) => log('debug', 'NRI socket error', { entry: 'nri', socket: this.opts.socket, error: e.message }));
    // 'close' follows every failure (refused, reset, closed by the runtime, protocol error):
    // the one place a lost connection is handled.
    sock.once('close', () => this.lost());
  }

  private setState(state: NriState): void {
    this.state = state;
    nriConnected.set(state === 'registered' ? 1 : 0);
  }

  private lost(): void {
    if (this.stopped) return;
    const wasRegistered = this.state === 'registered';
    this.setState('disconnected');
    if (this.opts.connected) {
      log('error', 'pre-registered NRI plugin lost its socket; exiting so the runtime restarts it', { entry: 'nri' });
      process.exit(1);
    }
    if (wasRegistered) log('warn', 'NRI connection closed; reconnecting', { entry: 'nri' });
    this.scheduleReconnect();
  }

  /** Full jitter over an exponential backoff capped at BACKOFF_MAX_MS; never two timers. */
  private scheduleReconnect(): void {
    if (this.stopped || this.opts.connected || this.retry) return;
    const delay = Math.round(this.backoffMs / 2 + Math.random() * (this.backoffMs / 2));
    log('debug', 'NRI: reconnecting', { entry: 'nri', socket: this.opts.socket, inMs: delay });
    this.retry = setTimeout(() => this.connect(), delay);
    this.backoffMs = Math.min(this.backoffMs * 2, BACKOFF_MAX_MS);
  }

  private session(sock: Duplex): void {
    const mux = new Mux(sock);
    this.mux = mux;
    this.syncPods = [];
    const broken = (e: Error) => {
      log('warn', 'NRI peer sent what kni cannot decode; closing the connection', { entry: 'nri', error: e.message.slice(0, 200) });
      mux.close();
    };
    new TtrpcEndpoint(mux.conn(PLUGIN_CONN), (service, method, payload) =>
      withSpan(`nri ${method.slice(0, 64)}`, { 'kni.entry_point': 'nri' }, () => this.handle(service, method, payload)), broken);
    const runtime = new TtrpcEndpoint(mux.conn(RUNTIME_CONN), undefined, broken);
    mux.on('error', (e: Error) => log('warn', 'NRI connection error', { entry: 'nri', error: e.message.slice(0, 200) }));
    let stableTimer: NodeJS.Timeout | undefined;
    mux.once('close', () => {
      if (stableTimer) clearTimeout(stableTimer);
      runtime.abort('NRI connection closed');
      if (this.opts.connected) this.lost(); // fd 3: there is no net socket 'close' to wait for
    });
    runtime
      .call(RUNTIME_SERVICE, 'RegisterPlugin', encode('RegisterPluginRequest', { pluginName: this.opts.pluginName, pluginIdx: this.opts.pluginIndex }), REGISTER_TIMEOUT_MS)
      .then(() => {
        if (this.mux !== mux || this.stopped) return;
        this.setState('registered');
        stableTimer = setTimeout(() => (this.backoffMs = BACKOFF_MIN_MS), STABLE_MS);
        stableTimer.unref();
        log('info', 'registered with the runtime over NRI', { entry: 'nri', plugin: `${this.opts.pluginIndex}-${this.opts.pluginName}` });
      })
      .catch((e) => {
        log('error', 'NRI registration failed', { entry: 'nri', error: (e as Error).message });
        mux.close();
      });
  }

  /** The pod of a pod event; a request without one is the peer's error, not ours. */
  private static pod(req: { pod?: NriPod }): NriPod {
    if (!req.pod || typeof req.pod.id !== 'string') throw new TtrpcError(STATUS.INVALID_ARGUMENT, 'the request has no pod');
    return req.pod;
  }

  private async handle(service: string, method: string, payload: Buffer): Promise<Buffer> {
    if (service !== PLUGIN_SERVICE) throw new TtrpcError(STATUS.UNIMPLEMENTED, `${service} is not served by kni`);
    try {
      switch (method) {
        case 'Configure': {
          const req = decodeRequest<{ runtimeName: string; runtimeVersion: string }>('ConfigureRequest', payload);
          log('info', 'NRI configure', { entry: 'nri', runtime: `${req.runtimeName} ${req.runtimeVersion}` });
          return encode('ConfigureResponse', { events: EVENT_MASK });
        }
        case 'Synchronize': {
          const req = decodeRequest<{ pods: NriPod[]; more: boolean }>('SynchronizeRequest', payload);
          if (this.syncPods.length + req.pods.length > MAX_SYNC_PODS) {
            this.syncPods = [];
            throw new TtrpcError(STATUS.RESOURCE_EXHAUSTED, `Synchronize lists more than ${MAX_SYNC_PODS} pods; nothing was released`);
          }
          for (const p of req.pods) this.syncPods.push(p.id);
          if (!req.more) {
            const live = this.syncPods;
            this.syncPods = [];
            // Answer at once; releasing may take a while and NRI calls have a 2 s budget.
            setImmediate(() => void this.reconcile(live));
          }
          return encode('SynchronizeResponse', req.more ? { more: true } : {}); // proto3: a false is not sent
        }
        case 'Shutdown':
          return encode('Empty', {});
        case 'RunPodSandbox':
          await this.onRun(NriPlugin.pod(decodeRequest<{ pod?: NriPod }>('RunPodSandboxRequest', payload)));
          return encode('RunPodSandboxResponse', {});
        case 'StopPodSandbox':
          await this.onStop(NriPlugin.pod(decodeRequest<{ pod?: NriPod }>('StopPodSandboxRequest', payload)));
          return encode('StopPodSandboxResponse', {});
        case 'RemovePodSandbox':
          await this.onStop(NriPlugin.pod(decodeRequest<{ pod?: NriPod }>('RemovePodSandboxRequest', payload)));
          return encode('RemovePodSandboxResponse', {});
        case 'StateChange': {
          const ev = decodeRequest<{ event: string; pod?: NriPod }>('StateChangeEvent', payload);
          if (ev.pod) {
            if (ev.event === 'RUN_POD_SANDBOX') await this.onRun(ev.pod);
            else if (ev.event === 'STOP_POD_SANDBOX' || ev.event === 'REMOVE_POD_SANDBOX') await this.onStop(ev.pod);
          }
          return encode('Empty', {});
        }
        default:
          throw new TtrpcError(STATUS.UNIMPLEMENTED, `${method} is not served by kni`);
      }
    } catch (e) {
      if (e instanceof TtrpcError) throw e;
      if (e instanceof KniError) throw new TtrpcError(STATUS[e.code], e.message);
      throw e;
    }
  }

  private async onRun(pod: NriPod): Promise<void> {
    // First of all: a sandbox kni does not wire (host network) is none of kni's to judge or refuse.
    const netns = pod.linux?.namespaces.find((n) => n.type === 'network')?.path;
    if (!netns) {
      log('debug', 'NRI pod without its own netns (host network): nothing to wire', { entry: 'nri', sandbox: pod.id });
      return;
    }
    const meta = {
      pod: { name: pod.name, namespace: pod.namespace, uid: pod.uid },
      labels: pod.labels,
      annotations: pod.annotations,
      runtimeHandler: pod.runtimeHandler,
    };
    // The CNI path (or the containerd network-plugin entry) came first: just add what NRI knows.
    if (await this.rt.updateMetadata(pod.id, meta)) return;
    if (this.rt.sandboxKind(pod.runtimeHandler, pod.annotations ?? {}) === 'vm') {
      // Kata scans the netns when the sandbox is created, before NRI's RunPodSandbox: too late.
      log('warn', 'vm sandbox reached kni only through NRI, after it started: its VMM will not see the network; use the CNI shim or the KNI API', { entry: 'nri', sandbox: pod.id, runtimeHandler: pod.runtimeHandler });
    }
    await this.rt.attach({ sandboxId: pod.id, netnsPath: netns, ...meta, cgroupParent: pod.linux?.cgroupParent, entryPoint: 'nri' });
  }

  private async onStop(pod: NriPod): Promise<void> {
    // The runtime is stopping (or removing) the sandbox: its netns goes next.
    await this.rt.detach(pod.id, true, 'nri', true);
  }

  private async reconcile(live: string[]): Promise<void> {
    try {
      const r = await this.rt.gc(live, this.opts.syncGraceSeconds * 1000);
      if (r.releasedSandboxes.length) log('info', 'NRI synchronize: released sandboxes the runtime no longer has', { entry: 'nri', sandboxes: r.releasedSandboxes });
    } catch (e) {
      log('error', 'NRI synchronize reconcile failed', { entry: 'nri', error: (e as Error).message });
    }
  }
}
