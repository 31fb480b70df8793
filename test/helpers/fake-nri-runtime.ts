// A container runtime's side of NRI, for tests (no containerd ≥ 1.7 installs here). It speaks
// the wire format a real runtime does: the multiplexer (plugin serves on conn 1, runtime on
// conn 2), ttrpc frames and messages, the handshake order (RegisterPlugin within 5 s, then
// Configure, then Synchronize), and NRI's default 2 s request timeout.
import fs from 'node:fs';
import net from 'node:net';
import { Duplex } from 'node:stream';
import { Mux } from '../../runtime-hooks/nri/mux';
import { decode, encode, PLUGIN_SERVICE, RUNTIME_SERVICE } from '../../runtime-hooks/nri/nri-proto';
import { STATUS, TtrpcEndpoint, TtrpcError } from '../../runtime-hooks/nri/ttrpc';

export const REQUEST_TIMEOUT_MS = 2000;

export interface FakePod {
  id: string;
  name?: string;
  namespace?: string;
  uid?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  runtimeHandler?: string;
  netns?: string;
  cgroupParent?: string;
}

const podMessage = (p: FakePod) => ({
  id: p.id,
  name: p.name ?? '',
  namespace: p.namespace ?? '',
  uid: p.uid ?? '',
  labels: p.labels ?? {},
  annotations: p.annotations ?? {},
  runtimeHandler: p.runtimeHandler ?? '',
  linux: { namespaces: p.netns ? [{ type: 'network', path: p.netns }] : [], cgroupParent: p.cgroupParent ?? '' },
});

export class FakeNriSession {
  registered: { pluginName: string; pluginIdx: string } | undefined;
  events = 0;
  private readonly plugin: TtrpcEndpoint;
  readonly ready: Promise<void>;
  private readonly mux: Mux;

  constructor(sock: Duplex, pods: () => FakePod[]) {
    this.mux = new Mux(sock);
    this.mux.on('error', () => undefined);
    this.plugin = new TtrpcEndpoint(this.mux.conn(1));
    let registered!: () => void;
    const gotRegistration = new Promise<void>((r) => (registered = r));
    new TtrpcEndpoint(this.mux.conn(2), async (service, method, payload) => {
      if (service !== RUNTIME_SERVICE || method !== 'RegisterPlugin') throw new TtrpcError(STATUS.UNIMPLEMENTED, `${service}/${method}`);
      this.registered = decode('RegisterPluginRequest', payload);
      setImmediate(registered);
      return encode('Empty', {});
    });
    this.ready = (async () => {
      const timer = setTimeout(() => this.mux.close(), 5000); // registration deadline
      await gotRegistration;
      clearTimeout(timer);
      const conf = decode<{ events: number }>('ConfigureResponse', await this.call('Configure', 'ConfigureRequest', { runtimeName: 'fake-nri-runtime', runtimeVersion: '0.0.1', registrationTimeout: 5000, requestTimeout: REQUEST_TIMEOUT_MS }));
      this.events = conf.events;
      // Synchronize in two batches to exercise "more".
      const all = pods().map(podMessage);
      const half = Math.ceil(all.length / 2);
      await this.call('Synchronize', 'SynchronizeRequest', { pods: all.slice(0, half), more: true });
      await this.call('Synchronize', 'SynchronizeRequest', { pods: all.slice(half), more: false });
    })();
  }

  /** One Plugin call with NRI's timeout; a plugin that times out is disconnected, as NRI does. */
  async call(method: string, type: string, msg: object): Promise<Buffer> {
    try {
      return await this.plugin.call(PLUGIN_SERVICE, method, encode(type, msg), REQUEST_TIMEOUT_MS);
    } catch (e) {
      if (e instanceof TtrpcError && e.code === STATUS.DEADLINE_EXCEEDED) this.mux.close();
      throw e;
    }
  }

  rawCall(service: string, method: string, payload: Buffer): Promise<Buffer> {
    return this.plugin.call(service, method, payload, REQUEST_TIMEOUT_MS);
  }

  runPodSandbox = (p: FakePod) => this.call('RunPodSandbox', 'RunPodSandboxRequest', { pod: podMessage(p) });
  stopPodSandbox = (p: FakePod) => this.call('StopPodSandbox', 'StopPodSandboxRequest', { pod: podMessage(p) });
  removePodSandbox = (p: FakePod) => this.call('RemovePodSandbox', 'RemovePodSandboxRequest', { pod: podMessage(p) });
  /** The pre-0.12 form: pod events as StateChange. */
  stateChange = (event: string, p: FakePod) => this.call('StateChange', 'StateChangeEvent', { event, pod: podMessage(p) });

  close(): void {
    this.mux.close();
  }
}

export class FakeNriRuntime {
  private server?: net.Server;
  private sessions: FakeNriSession[] = [];
  private waiting: ((s: FakeNriSession) => void)[] = [];
  private readyQueue: FakeNriSession[] = [];
  pods: FakePod[] = [];

  constructor(readonly socket: string) {}

  async listen(): Promise<void> {
    fs.rmSync(this.socket, { force: true });
    this.server = net.createServer((sock) => this.adopt(sock));
    await new Promise<void>((r) => this.server!.listen(this.socket, r));
  }

  adopt(sock: Duplex): FakeNriSession {
    const s = new FakeNriSession(sock, () => this.pods);
    this.sessions.push(s);
    s.ready.then(() => {
      const w = this.waiting.shift();
      if (w) w(s);
      else this.readyQueue.push(s);
    }, () => undefined);
    return s;
  }

  /** The next session to finish the handshake. */
  nextSession(timeoutMs = 15_000): Promise<FakeNriSession> {
    const done = this.readyQueue.shift();
    if (done) return Promise.resolve(done);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('no plugin completed the NRI handshake in time')), timeoutMs);
      this.waiting.push((s) => {
        clearTimeout(t);
        resolve(s);
      });
    });
  }

  /** The runtime goes away (a restart): listener and connections closed. */
  async stop(): Promise<void> {
    for (const s of this.sessions) s.close();
    this.sessions = [];
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
    this.server = undefined;
    fs.rmSync(this.socket, { force: true });
  }
}
