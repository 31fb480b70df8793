// Forged packets from a pod, and whether they arrive (node-guards.test.ts, host-ports.test.ts).
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';
import { inNetns, sh } from './sh';

/** Echo requests that reached a netns so far (its ICMP counters: nothing else needs to listen there). */
export function echoes(netns: string, family: 4 | 6): number {
  const text = inNetns(netns, 'cat', [family === 4 ? '/proc/net/snmp' : '/proc/net/snmp6']).out;
  if (family === 6) return Number(/^Icmp6InEchos\s+(\d+)/m.exec(text)![1]);
  const [names, values] = text.split('\n').filter((l) => l.startsWith('Icmp:')).map((l) => l.split(/\s+/));
  return Number(values[names.indexOf('InEchos')]);
}

/** A pod's eth0 as a sender of forged frames: its netns, ifindex and MAC. */
export interface Sender {
  netns: string;
  ifindex: number;
  mac: string;
}

export function senderOf(netns: string, mac: string): Sender {
  const ifindex = Number(/^(\d+):/.exec(inNetns(netns, 'ip', ['-o', 'link', 'show', 'eth0']).out)![1]);
  return { netns, ifindex, mac };
}

/**
 * Echo requests from `from` (any address: written whole on a packet socket, as CAP_NET_RAW
 * allows) to `to` in netns `target`, in frames to `dstMac`; how many arrived there.
 */
export function arrivedFrom(s: Sender, from: string, to: string, dstMac: string, target: string): number {
  const family = to.includes(':') ? 6 : 4;
  const before = echoes(target, family);
  sh('nsenter', [`--net=${s.netns}`, process.execPath, path.join(packageRoot(), 'dist/test/helpers/forge-in-netns.js'), String(s.ifindex), s.mac, dstMac, from, to, '2']);
  // Delivered within the send, across veths and a bridge; a moment for a busy machine.
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
  return echoes(target, family) - before;
}

