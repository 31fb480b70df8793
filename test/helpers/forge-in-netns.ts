// Run by node-guards.test.ts inside a pod's netns (nsenter): sends ICMP echo requests in frames
// it writes whole on a packet socket, with any source address, as a process with CAP_NET_RAW
// can (the kernel's own stack would refuse a source the pod does not have).
//   <ifindex> <srcMac> <dstMac> <srcIp> <dstIp> [count]
import { isIPv4 } from 'node:net';
import * as libc from '../../plugin/sys/libc';
import { ipBytes, parseIp } from '../../plugin/ipam/ip';

const AF_PACKET = 17;
const mac = (s: string): Buffer => Buffer.from(s.split(':').map((h) => parseInt(h, 16)));
const ip = (s: string): Buffer => ipBytes(parseIp(s).family, parseIp(s).value);

function checksum(b: Buffer): number {
  let sum = 0;
  for (let i = 0; i < b.length; i += 2) sum += (b[i] << 8) + (i + 1 < b.length ? b[i + 1] : 0);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

function echo(type: number, seq: number): Buffer {
  const m = Buffer.alloc(8 + 32, 0x61);
  m.writeUInt8(type, 0);
  m.writeUInt8(0, 1);
  m.writeUInt16BE(0, 2);
  m.writeUInt16BE(0x4b4e, 4);
  m.writeUInt16BE(seq, 6);
  return m;
}

function packet(src: string, dst: string, seq: number): { ethertype: number; body: Buffer } {
  if (isIPv4(dst)) {
    const icmp = echo(8, seq);
    icmp.writeUInt16BE(checksum(icmp), 2);
    const h = Buffer.alloc(20);
    h.writeUInt8(0x45, 0);
    h.writeUInt16BE(20 + icmp.length, 2);
    h.writeUInt16BE(seq, 4);
    h.writeUInt16BE(0x4000, 6);
    h.writeUInt8(64, 8);
    h.writeUInt8(1, 9);
    ip(src).copy(h, 12);
    ip(dst).copy(h, 16);
    h.writeUInt16BE(checksum(h), 10);
    return { ethertype: 0x0800, body: Buffer.concat([h, icmp]) };
  }
  const icmp = echo(128, seq);
  const pseudo = Buffer.alloc(40);
  ip(src).copy(pseudo, 0);
  ip(dst).copy(pseudo, 16);
  pseudo.writeUInt32BE(icmp.length, 32);
  pseudo.writeUInt8(58, 39);
  icmp.writeUInt16BE(checksum(Buffer.concat([pseudo, icmp])), 2);
  const h = Buffer.alloc(40);
  h.writeUInt32BE(0x60000000, 0);
  h.writeUInt16BE(icmp.length, 4);
  h.writeUInt8(58, 6);
  h.writeUInt8(64, 7);
  ip(src).copy(h, 8);
  ip(dst).copy(h, 24);
  return { ethertype: 0x86dd, body: Buffer.concat([h, icmp]) };
}

const [ifindex, srcMac, dstMac, src, dst, count = '2'] = process.argv.slice(2);
const fd = libc.socket(AF_PACKET, libc.SOCK_RAW, 0);
const ll = Buffer.alloc(20);
ll.writeUInt16LE(AF_PACKET, 0);
ll.writeInt32LE(Number(ifindex), 4);
libc.bind(fd, ll);
for (let i = 1; i <= Number(count); i++) {
  const p = packet(src, dst, i);
  const eth = Buffer.alloc(14);
  mac(dstMac).copy(eth, 0);
  mac(srcMac).copy(eth, 6);
  eth.writeUInt16BE(p.ethertype, 12);
  libc.send(fd, Buffer.concat([eth, p.body]));
}
libc.close(fd);
