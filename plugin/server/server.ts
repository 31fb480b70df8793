// The gRPC server on a unix socket (mode 0600): the KNI POC service and kni's own, side by side.
// The HTTP/2 and gRPC framing are kni's own (./grpc-server.ts, ./http2: why, there); the
// services, their codecs and the clients are grpc-js's. Bounded: connections at once, time to
// start speaking HTTP/2, idle and endless connections.
import * as grpc from '@grpc/grpc-js';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { log } from '../core/log';
import { NetworkRuntime } from '../core/network-runtime';
import { kniPocHandlers } from './kni-poc-service';
import { guardRequests } from './request-guard';
import { warmCodecs } from './codec-warmup';
import { kniService, runtimeService } from './protos';
import { GrpcServer } from './grpc-server';
import { ClusterView, runtimeHandlers } from './runtime-service';
import { makeDir } from '../sys/make-dir';

export const GRPC_LIMITS = {
  /** Connections at once; each holds a file descriptor (the hard limit here is 20 000). */
  maxConnections: 1024,
  /** A connection must have started speaking (the HTTP/2 preface) within this time. */
  handshakeMs: 10_000,
  /** A connection with no call in flight this long is closed (clients reconnect on their own). */
  idleMs: 5 * 60_000,
  /** Every connection is asked to go away after this (GOAWAY), then closed after the grace:
   *  what bounds a connection holding a half-sent call open for ever. */
  maxAgeMs: 30 * 60_000,
  maxAgeGraceMs: 60_000,
  /** Calls at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS); more are refused. */
  maxConcurrentStreams: 1000,
  /** A request's headers (SETTINGS_MAX_HEADER_LIST_SIZE); past it the call is answered HTTP 431. */
  maxHeaderListSize: 64 << 10,
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
  /** Stops accepting, lets calls in flight finish, then calls done. */
  shutdown(done: () => void): void;
}

/**
 * Serves the KNI services, plus the runtime hooks' services, on one socket. `cluster`: the node
 * agent, when kni runs in Kubernetes (GetNode reports it).
 */
export async function serve(rt: NetworkRuntime, socketPath: string, extra: ExtraService[] = [], cluster?: ClusterView): Promise<KniServer> {
  let lastProtocolLog = 0;
  const server = new GrpcServer(
    GRPC_LIMITS,
    (message) => {
      if (Date.now() - lastProtocolLog < 1000) return;
      lastProtocolLog = Date.now();
      log('warn', 'gRPC socket: connection closed on a protocol error', { socket: socketPath, error: message });
    },
  );
  const services: [grpc.ServiceDefinition, grpc.UntypedServiceImplementation][] = [
    [guardRequests(kniService().service), kniPocHandlers(rt)],
    [guardRequests(runtimeService().service), runtimeHandlers(rt, cluster)],
    ...extra.map((s): [grpc.ServiceDefinition, grpc.UntypedServiceImplementation] => [guardRequests(s.definition), s.handlers]),
  ];
  for (const [definition, handlers] of services) server.addService(definition, handlers);
  let lastRefusalLog = 0;
  const listener = net.createServer((sock) => server.accept(sock));
  listener.maxConnections = GRPC_LIMITS.maxConnections;
  listener.on('drop', () => {
    if (Date.now() - lastRefusalLog < 1000) return; // a flood must not become a flood of log lines
    lastRefusalLog = Date.now();
    log('warn', 'gRPC socket: connection refused, too many at once', { socket: socketPath, max: GRPC_LIMITS.maxConnections });
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
  void warmCodecs(services.map(([definition]) => definition)).then(({ types, failed }) =>
    log(failed.length ? 'warn' : 'debug', 'message codecs made ahead', { types: types.size, ...(failed.length ? { failed } : {}) }));
  return {
    shutdown(done) {
      listener.close();
      server.shutdown(done);
    },
  };
}
