// The gRPC server on a unix socket (mode 0600): the KNI POC service and kni's own, side by side.
import * as grpc from '@grpc/grpc-js';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { NetworkRuntime } from '../core/network-runtime';
import { kniPocHandlers } from './kni-poc-service';
import { kniService, runtimeService } from './protos';
import { runtimeHandlers } from './runtime-service';

/** A socket file nobody answers on is stale (a crashed daemon's); a live one means a second daemon. */
export async function clearStaleSocket(socketPath: string): Promise<void> {
  fs.mkdirSync(path.dirname(socketPath), { recursive: true, mode: 0o755 });
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

/** Serves the KNI services, plus the runtime hooks' services, on one socket. */
export async function serve(rt: NetworkRuntime, socketPath: string, extra: ExtraService[] = []): Promise<grpc.Server> {
  const server = new grpc.Server();
  server.addService(kniService().service, kniPocHandlers(rt));
  server.addService(runtimeService().service, runtimeHandlers(rt));
  for (const s of extra) server.addService(s.definition, s.handlers);
  // The socket is born 0600: no window in which another user could connect.
  const oldMask = process.umask(0o177);
  try {
    await new Promise<number>((resolve, reject) =>
      server.bindAsync(`unix://${socketPath}`, grpc.ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(port))),
    );
  } finally {
    process.umask(oldMask);
  }
  fs.chmodSync(socketPath, 0o600);
  return server;
}
