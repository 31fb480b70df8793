// Whether a socket of the node listens on a port (Trace: "nothing listens there" is the usual
// "connection refused"), read from the kernel's socket tables of the daemon's own network
// namespace, the node's: /proc/self/net/{tcp,tcp6,udp,udp6}, as `ss -ltun` reads them. No
// process is named (that takes every process's file descriptors); `ss -ltnp` does it.
import fs from 'node:fs';
import type { Family } from '../ipam/ip';

/** TCP's LISTEN, and an unconnected UDP socket's state (TCP_CLOSE): a bound port that takes datagrams. */
const LISTENING = { tcp: '0A', udp: '07' } as const;

/**
 * Whether a socket of the node bound to `port` takes `protocol` to `address` (of `family`): bound
 * to it or to any address (an IPv6 socket on :: takes IPv4 too unless it is v6-only, which the
 * table does not say: counted); with no address, to any address. Undefined for SCTP, whose
 * table is not read.
 */
export function nodeListens(protocol: 'TCP' | 'UDP' | 'SCTP', family: Family, port: number, address?: bigint): boolean | undefined {
  if (protocol === 'SCTP') return undefined;
  const proto = protocol === 'TCP' ? 'tcp' : 'udp';
  for (const [file, fileFamily] of [[proto, 4], [`${proto}6`, 6]] as const) {
    if (family === 6 && fileFamily === 4) continue;
    let text: string;
    try {
      text = fs.readFileSync(`/proc/self/net/${file}`, 'utf8');
    } catch {
      continue; // no IPv6 in this kernel
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 4 || f[3] !== LISTENING[proto]) continue;
      const [hexAddress, hexPort] = f[1].split(':');
      if (parseInt(hexPort, 16) !== port) continue;
      const bound = tableAddress(hexAddress);
      if (address === undefined || bound === 0n || (fileFamily === family && bound === address)) return true;
    }
  }
  return false;
}

/** An address as the socket tables print it: 32-bit words in the host's (little-endian) byte order. */
function tableAddress(hex: string): bigint {
  let v = 0n;
  for (let i = 0; i < hex.length; i += 8) {
    const word = hex.slice(i, i + 8);
    v = (v << 32n) | BigInt(`0x${word.slice(6, 8)}${word.slice(4, 6)}${word.slice(2, 4)}${word.slice(0, 2)}`);
  }
  return v;
}
