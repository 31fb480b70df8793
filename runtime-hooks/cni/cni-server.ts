// The unix socket kni-cni talks to (mode 0600): one request and one answer per connection.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { log } from '../../plugin/core/log';
import { NetworkRuntime } from '../../plugin/core/network-runtime';
import { handleCni } from './cni-handler';
import { withSpan } from '../../plugin/observe/tracing';
import { cniError, CNI_ERR } from './cni-result';
import { decodeRequest, encodeResponse, MAX_REQUEST } from './cni-wire';

export async function serveCni(rt: NetworkRuntime, socketPath: string): Promise<net.Server> {
  fs.mkdirSync(path.dirname(socketPath), { recursive: true, mode: 0o755 });
  fs.rmSync(socketPath, { force: true }); // the gRPC socket check already proved no other daemon runs
  const server = net.createServer((conn) => {
    let buf = Buffer.alloc(0);
    let done = false;
    const answer = (code: number, out: string) => {
      done = true;
      conn.end(encodeResponse(code, out));
    };
    conn.setTimeout(30_000, () => conn.destroy());
    conn.on('error', () => undefined);
    conn.on('data', (chunk: Buffer) => {
      if (done) return;
      buf = Buffer.concat([buf, chunk]);
      if (buf.length < 4) return;
      const len = buf.readUInt32BE(0);
      if (len > MAX_REQUEST) return answer(1, JSON.stringify(cniError('1.0.0', CNI_ERR.IO_FAILURE, `request of ${len} bytes is too large`)));
      if (buf.length < 4 + len) return;
      let env: Map<string, string>;
      try {
        env = decodeRequest(buf.subarray(4, 4 + len));
      } catch (e) {
        return answer(1, JSON.stringify(cniError('1.0.0', CNI_ERR.DECODING_FAILURE, `malformed request from kni-cni: ${(e as Error).message}`)));
      }
      done = true;
      const started = process.hrtime.bigint();
      const command = env.get('CNI_COMMAND') ?? '';
      withSpan(`cni ${command.slice(0, 16)}`, { 'kni.entry_point': 'cni', 'kni.sandbox.id': (env.get('CNI_CONTAINERID') ?? '').slice(0, 128) }, () => handleCni(rt, env)).then((r) => {
        const ms = Number(process.hrtime.bigint() - started) / 1e6;
        const fields = { entry: 'cni', command: env.get('CNI_COMMAND'), sandbox: env.get('CNI_CONTAINERID'), ms };
        if (r.exitCode === 0) log('debug', 'cni', fields);
        else log('warn', 'cni call failed', { ...fields, error: r.output.trim() });
        conn.end(encodeResponse(r.exitCode, r.output));
      });
    });
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
  return server;
}
