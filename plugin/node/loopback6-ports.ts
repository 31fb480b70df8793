// Host ports on [::1] from the node. The kernel cannot carry them as it carries 127.0.0.1 (DNAT
// plus SNAT, host-ports.ts): a reply de-NATed to ::1 that arrives on any link but lo is dropped
// (measured here: the pod gets the SYN, the node never its answer; kube-proxy's localhost
// NodePorts are IPv4 only for that reason). So, as Docker's userland proxy does, kni listens on
// [::1]:<host port> itself for each TCP mapping that covers ::1 and relays each connection to
// the pod's IPv6 address. Only the node's own processes reach ::1. Bounded: connections at once
// per port, a connect deadline, both sides closed together. UDP on ::1 is not relayed.
import net from 'node:net';
import { log } from '../core/log';
import type { HostPortTarget } from './host-ports';

/** Connections at once through one port's relay, and how long a connect to the pod may take. */
export const RELAY_MAX_CONNECTIONS = 256;
const CONNECT_MS = 5000;

interface Relay {
  /** "[pod]:port" it relays to: a change makes a new relay. */
  to: string;
  server: net.Server;
}

/** The relays a set of targets wants: host port → the pod's [IPv6]:containerPort. */
export function wantedRelays(targets: HostPortTarget[]): Map<number, { address: string; port: number }> {
  const out = new Map<number, { address: string; port: number }>();
  for (const t of targets) {
    const pod = t.addresses.find((a) => a.family === 6)?.address;
    if (!pod) continue;
    for (const m of t.mappings) {
      if (m.protocol !== 'tcp' || (m.hostIp && m.hostIp !== '::1')) continue;
      out.set(m.hostPort, { address: pod, port: m.containerPort });
    }
  }
  return out;
}

export class Loopback6Ports {
  private readonly relays = new Map<number, Relay>();

  /** Relays exactly the host ports of `targets` that cover ::1 (the rest closed). */
  sync(targets: HostPortTarget[]): void {
    const want = wantedRelays(targets);
    for (const [port, r] of this.relays) {
      const w = want.get(port);
      if (w && `[${w.address}]:${w.port}` === r.to) continue;
      r.server.close();
      this.relays.delete(port);
    }
    for (const [port, w] of want) if (!this.relays.has(port)) this.open(port, w.address, w.port);
  }

  /** Every relay closed (kni stopping). */
  close(): void {
    for (const r of this.relays.values()) r.server.close();
    this.relays.clear();
  }

  get ports(): number[] {
    return [...this.relays.keys()];
  }

  private open(port: number, address: string, podPort: number): void {
    const server = net.createServer((client) => {
      const pod = net.connect({ host: address, port: podPort });
      const deadline = setTimeout(() => pod.destroy(), CONNECT_MS);
      pod.once('connect', () => clearTimeout(deadline));
      const end = (): void => {
        clearTimeout(deadline);
        client.destroy();
        pod.destroy();
      };
      for (const s of [client, pod]) {
        s.on('error', end);
        s.on('close', end);
      }
      client.pipe(pod).pipe(client);
    });
    server.maxConnections = RELAY_MAX_CONNECTIONS;
    server.on('error', (e: NodeJS.ErrnoException) => {
      if (this.relays.get(port)?.server === server) this.relays.delete(port);
      log('warn', 'host port on [::1] cannot be relayed to its pod: something of the node holds it', { port, error: e.code ?? e.message });
    });
    server.listen({ host: '::1', port, ipv6Only: true });
    this.relays.set(port, { to: `[${address}]:${podPort}`, server });
  }
}
