// The gRPC server on a unix socket (mode 0600): the KNI POC service and kni's own, side by side,
// served by grpc-js (its HTTP/2 is Node's, nghttp2). kni owns the listening socket and hands each
// accepted connection to grpc-js (its connection injector), so that it keeps the bounds grpc-js
// has no option for: connections at once (the listener's cap), and a connection must start
// speaking within a time (it is handed over only once it has). The rest are grpc-js's options:
// calls at once per connection, idle and endless connections, the largest request; the
// per-method request caps are checked on the raw bytes before decoding (request-guard.ts).
import * as grpc from '@grpc/grpc-js';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { log } from '../core/log';
import { NetworkRuntime } from '../core/network-runtime';
import { kniPocHandlers } from './kni-poc-service';
import { guardRequests, METHOD_CAPS } from './request-guard';
import { GRPC_COMMON_OPTIONS, kniService, runtimeService } from './protos';
import { ClusterView, runtimeHandlers } from './runtime-service';
import { makeDir } from '../sys/make-dir';

export interface GrpcLimits {
  /** Connections at once; each holds a file descriptor (the hard limit here is 20 000). */
  maxConnections: number;
  /** A connection must have sent its first bytes (the HTTP/2 preface) within this time. */
  handshakeMs: number;
  /** A connection with no call in flight this long is closed (clients reconnect on their own). */
  idleMs: number;
  /** Every connection is asked to go away after this (GOAWAY), then closed after the grace:
   *  what bounds a connection holding a half-sent call open for ever. */
  maxAgeMs: number;
  maxAgeGraceMs: number;
  /** Calls at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS); more are refused. */
  maxConcurrentStreams: number;
  /** The largest request any method takes (GarbageCollect's live list); each method's own cap is smaller or equal. */
  maxRequestBytes: number;
  /** What one connection's HTTP/2 session may hold in nghttp2 (headers, frames not yet taken), in MB. */
  maxSessionMemoryMb: number;
}

export const GRPC_LIMITS: GrpcLimits = {
  maxConnections: 1024,
  handshakeMs: 10_000,
  idleMs: 5 * 60_000,
  maxAgeMs: 30 * 60_000,
  maxAgeGraceMs: 60_000,
  // Each stream may hold a request of up to maxRequestBytes while it arrives: 100 of them bound
  // what one connection can make kni hold.
  maxConcurrentStreams: 100,
  maxRequestBytes: Math.max(...Object.values(METHOD_CAPS)),
  maxSessionMemoryMb: 32,
};

/** A socket file nobody answers on is stale (a crashed daemon's); a live one means a second daemon. */
export async function clearStaleSocket(socketPath: string): Promise<void> {
  makeDir(path.dirname(socketPath), 0o755);
  if (!fs.existsSync(socketPath)) return;
  const live = await new Promise<boolean>((resolve) => {
    const c = net.connect(socketPath);
    c.once('connect', () => { c.destroy(); resolve(true); });
    c.once('error', () => resolve(false));
  });
  if (live) throw new Error(`another process is serving on ${socketPath}`);
  fs.rmSync(socketPath, { force: true });
}

export interface ExtraService {
  definition: grpc.ServiceDefinition;
  handlers: grpc.UntypedServiceImplementation;
}

export interface KniServer {
  /**
   * Stops accepting; calls in flight are answered, open server streams (Watch) end with
   * UNAVAILABLE (their clients resume elsewhere); done once every connection is closed.
   */
  shutdown(done: () => void): void;
}

/** How long a shutdown waits for calls in flight before it cuts the connections. */
const SHUTDOWN_GRACE_MS = 2000;

let connectionNumbers = 0;

/**
 * grpc-js serving `services` on a unix socket kni listens on (born 0600), with `limits`.
 * `name` says which socket in log lines.
 */
export async function serveGrpc(services: ExtraService[], socketPath: string, limits: GrpcLimits = GRPC_LIMITS): Promise<KniServer> {
  const server = new grpc.Server({
    ...GRPC_COMMON_OPTIONS,
    'grpc.max_concurrent_streams': limits.maxConcurrentStreams,
    'grpc.max_connection_idle_ms': limits.idleMs,
    'grpc.max_connection_age_ms': limits.maxAgeMs,
    'grpc.max_connection_age_grace_ms': limits.maxAgeGraceMs,
    'grpc.max_receive_message_length': limits.maxRequestBytes,
    'grpc-node.max_session_memory': limits.maxSessionMemoryMb,
  });
  // Open server streams, to end with UNAVAILABLE at shutdown (grpc-js would wait for them).
  const streams = new Set<grpc.ServerWritableStream<unknown, unknown>>();
  for (const s of services) {
    const handlers: grpc.UntypedServiceImplementation = {};
    for (const [name, m] of Object.entries(s.definition)) {
      const h = s.handlers[name] ?? (m.originalName ? s.handlers[m.originalName] : undefined);
      if (!h) continue;
      if (!m.responseStream) {
        handlers[name] = h;
        continue;
      }
      handlers[name] = ((call: grpc.ServerWritableStream<unknown, unknown>) => {
        streams.add(call);
        const gone = () => streams.delete(call);
        call.once('close', gone);
        call.once('finish', gone);
        call.once('cancelled', gone);
        (h as grpc.handleServerStreamingCall<unknown, unknown>)(call);
      }) as grpc.UntypedHandleCall;
    }
    server.addService(s.definition, handlers);
  }
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  let lastRefusalLog = 0;
  const listener = net.createServer((sock) => {
    sock.on('error', () => undefined);
    // Handed to grpc-js once it has spoken; a silent connection is closed without a byte.
    const silent = setTimeout(() => sock.destroy(), limits.handshakeMs);
    sock.once('close', () => clearTimeout(silent));
    sock.once('readable', () => {
      clearTimeout(silent);
      if (sock.destroyed) return;
      // Callers all come over one unix socket: each connection is named for what tells calls
      // apart by connection (getPeer: Watch's bound per connection).
      Object.defineProperty(sock, 'remoteAddress', { value: `unix:${++connectionNumbers}` });
      injector.injectConnection(sock);
    });
  });
  listener.maxConnections = limits.maxConnections;
  listener.on('drop', () => {
    if (Date.now() - lastRefusalLog < 1000) return; // a flood must not become a flood of log lines
    lastRefusalLog = Date.now();
    log('warn', 'gRPC socket: connection refused, too many at once', { socket: socketPath, max: limits.maxConnections });
  });
  // The socket is born 0600: no window in which another user could connect.
  const oldMask = process.umask(0o177);
  try {
    await new Promise<void>((resolve, reject) => {
      listener.once('error', reject);
      listener.listen(socketPath, () => resolve());
    });
  } finally {
    process.umask(oldMask);
  }
  fs.chmodSync(socketPath, 0o600);
  return {
    shutdown(done) {
      listener.close();
      for (const call of streams) call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'kni is shutting down', metadata: new grpc.Metadata() });
      streams.clear();
      let finished = false;
      const finish = () => {
        if (finished) return;
        finished = true;
        done();
      };
      const force = setTimeout(() => {
        server.forceShutdown();
        injector.destroy();
        finish();
      }, SHUTDOWN_GRACE_MS);
      force.unref();
      server.tryShutdown(() => {
        clearTimeout(force);
        injector.destroy();
        finish();
      });
    },
  };
}

/**
 * Serves the KNI services, plus the runtime hooks' services, on one socket. `cluster`: the node
 * agent, when kni runs in Kubernetes (GetNode reports it).
 */
export async function serve(rt: NetworkRuntime, socketPath: string, extra: ExtraService[] = [], cluster?: ClusterView): Promise<KniServer> {
  const services: ExtraService[] = [
    { definition: guardRequests(kniService().service), handlers: kniPocHandlers(rt) },
    { definition: guardRequests(runtimeService().service), handlers: runtimeHandlers(rt, cluster) },
    ...extra.map((s) => ({ definition: guardRequests(s.definition), handlers: s.handlers })),
  ];
  return serveGrpc(services, socketPath);
}
