// A unix socket server standing in for a runtime at the byte level: it runs a script on each
// connection the daemon makes, and counts them. Shares no code with kni's encoders.
import fs from 'node:fs';
import net from 'node:net';
import { RUN } from './sh';

export const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

/** A runtime socket that runs a script on each connection kni makes, and counts them. */
export class RawPeer {
  readonly socket = `/tmp/${RUN}-rawnri-${Math.random().toString(36).slice(2, 8)}.sock`;
  connections: { at: number; sock: net.Socket }[] = [];
  private server?: net.Server;

  constructor(private readonly onConn: (sock: net.Socket, n: number) => void) {}

  async listen(): Promise<void> {
    fs.rmSync(this.socket, { force: true });
    this.server = net.createServer((sock) => {
      sock.on('error', () => undefined);
      this.connections.push({ at: Date.now(), sock });
      this.onConn(sock, this.connections.length);
    });
    await new Promise<void>((r) => this.server!.listen(this.socket, r));
  }

  async close(): Promise<void> {
    for (const c of this.connections) c.sock.destroy();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
    fs.rmSync(this.socket, { force: true });
  }
}

