// What the HTTP/2 and gRPC server tests share: their limits, and a directory for their sockets.
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { H2Limits } from '../../plugin/server/http2/connection';

/** Limits for a test's server: roomy, so that only the test's own case trips one. */
export const H2_TEST_LIMITS: H2Limits = { handshakeMs: 2000, idleMs: 60_000, maxAgeMs: 600_000, maxAgeGraceMs: 1000, maxConcurrentStreams: 100, maxHeaderListSize: 16 << 10 };

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
