// The unix socket kni-cni talks to (mode 0600): one request and one answer per connection.
// Bounded in every way a peer could push: request size (MAX_REQUEST), time to send the whole
// request (a deadline from accept, not reset by each byte), and connections at once.
import fs from 'node:fs';
import net from 'node:net';
import { log } from '../../plugin/core/log';
import { NetworkRuntime } from '../../plugin/core/network-runtime';
import { withSpan } from '../../plugin/observe/tracing';
import { clearStaleSocket } from '../../plugin/server/server';
import { ByteQueue } from '../wire/byte-queue';
import { handleCni } from './cni-handler';
import { kniConflist } from './cni-install';
import type { CniConfig } from '../../plugin/core/config';
import { cniError, CNI_ERR } from './cni-result';
import { decodeRequest, encodeResponse, MAX_REQUEST } from './cni-wire';

/** From accept to the last byte of the request; runtimes send it in one write. */
const REQUEST_DEADLINE_MS = 10_000;
/** kni-cni calls at once (a runtime makes a few per pod; 16 pods at once use ~50). */
const MAX_CNI_CONNECTIONS = 256;

export async function serveCni(rt: NetworkRuntime, socketPath: string): Promise<net.Server> {
  await clearStaleSocket(socketPath); // a live one is another daemon's: refused, never taken over
  let lastDropLog = 0;
  const server = net.createServer((conn) => {
    const queue = new ByteQueue();
    let done = false;
    const answer = (code: number, out: string) => {
      done = true;
      clearTimeout(deadline);
      conn.end(encodeResponse(code, out));
    };
    const deadline = setTimeout(() => {
      if (!done) answer(1, JSON.stringify(cniError('1.0.0', CNI_ERR.IO_FAILURE, `request not received within ${REQUEST_DEADLINE_MS} ms`)));
      conn.destroySoon();
    }, REQUEST_DEADLINE_MS);
    conn.on('error', () => undefined);
    conn.on('close', () => clearTimeout(deadline));
    conn.on('data', (chunk: Buffer) => {
      if (done) return;
      queue.push(chunk);
      if (queue.length < 4) return;
      const len = queue.peek(4).readUInt32BE(0);
      if (len > MAX_REQUEST) {
        queue.clear();
        return answer(1, JSON.stringify(cniError('1.0.0', CNI_ERR.IO_FAILURE, `request of ${len} bytes is larger than ${MAX_REQUEST}`)));
      }
      if (queue.length < 4 + len) return;
      if (queue.length > 4 + len) return answer(1, JSON.stringify(cniError('1.0.0', CNI_ERR.DECODING_FAILURE, 'malformed request from kni-cni: bytes after the request')));
      let env: Map<string, string>;
      try {
        env = decodeRequest(queue.take(4 + len).subarray(4));
      } catch (e) {
        return answer(1, JSON.stringify(cniError('1.0.0', CNI_ERR.DECODING_FAILURE, `malformed request from kni-cni: ${(e as Error).message}`)));
      }
      done = true;
      clearTimeout(deadline);
      const started = process.hrtime.bigint();
      const command = env.get('CNI_COMMAND') ?? '';
      withSpan(`cni ${command.slice(0, 16)}`, { 'kni.entry_point': 'cni', 'kni.sandbox.id': (env.get('CNI_CONTAINERID') ?? '').slice(0, 128) }, () => handleCni(rt, env)).then((r) => {
        const ms = Number(process.hrtime.bigint() - started) / 1e6;
        const fields = { entry: 'cni', command: command.slice(0, 16), sandbox: (env.get('CNI_CONTAINERID') ?? '').slice(0, 128), ms };
        if (r.exitCode === 0) log('debug', 'cni', fields);
        else log('warn', 'cni call failed', { ...fields, error: r.output.trim() });
        conn.end(encodeResponse(r.exitCode, r.output));
      });
    });
  });
  server.maxConnections = MAX_CNI_CONNECTIONS;
  server.on('drop', () => {
    // Once a second at most: a flood must not become a flood of log lines.
    if (Date.now() - lastDropLog < 1000) return;
    lastDropLog = Date.now();
    log('warn', 'CNI socket: connection refused, too many at once', { socket: socketPath, max: MAX_CNI_CONNECTIONS });
  });
  const oldMask = process.umask(0o177);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socketPath, () => resolve());
    });
  } finally {
    process.umask(oldMask);
  }
  fs.chmodSync(socketPath, 0o600);
  // Served again: kni-cni stops treating the socket's absence as a restart.
  fs.rmSync(restartMarker(socketPath), { force: true });
  return server;
}

/** Keep equal to RESTART_GRACE_S in runtime-hooks/cni-shim/kni-cni.c. */
export const RESTART_GRACE_S = 60;

const restartMarker = (socketPath: string) => `${socketPath}.restarting`;

/**
 * Before a graceful stop's socket goes: for RESTART_GRACE_S, kni-cni answers STATUS ready and
 * holds the other commands until a new kni serves (see kni-cni.c). Not when kni's conflist is
 * gone (the preStop found kni leaving the node): no kni is coming back then.
 */
export function markRestarting(cfg: CniConfig): void {
  const conflist = kniConflist(cfg);
  if (conflist && !fs.existsSync(conflist)) return;
  try {
    fs.writeFileSync(restartMarker(cfg.socket), `${JSON.stringify({ stoppedAt: new Date().toISOString(), pid: process.pid, graceSeconds: RESTART_GRACE_S })}\n`, { mode: 0o644 });
  } catch (e) {
    log('warn', 'cannot leave the restart marker for kni-cni: until kni serves again, CNI calls fail and STATUS reports the network not ready', { error: (e as Error).message });
  }
}
