// What the gRPC server tests share: their limits, and a directory for their sockets.
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { GRPC_LIMITS, GrpcLimits } from '../../plugin/server/server';

/** Limits for a test's server: roomy, so that only the test's own case trips one. */
export const GRPC_TEST_LIMITS: GrpcLimits = { ...GRPC_LIMITS, handshakeMs: 2000, idleMs: 60_000, maxAgeMs: 600_000, maxAgeGraceMs: 1000 };

/** A suite's socket directory; the servers listed in `servers` are closed and the directory removed after the suite. */
export function socketDir(prefix: string): { dir: string; servers: net.Server[] } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const servers: net.Server[] = [];
  after(() => {
    servers.forEach((s) => s.close());
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { dir, servers };
}
