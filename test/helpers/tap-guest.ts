// Plays a VM guest on a tap: run inside the pod netns (nsenter) as
//   node tap-guest.js TAP IPV4 MAC
// It attaches to the tap, answers ARP requests and ICMP echo requests for IPV4 as MAC, and
// prints "ready", then "icmp N" for each echo request it answers.
import fs from 'node:fs';
import { IFF_NO_PI, IFF_TAP, ifreq } from '../../plugin/pod/vm-wiring';
import * as libc from '../../plugin/sys/libc';

const TUNSETIFF = 0x400454ca;
const [tap, ip, mac] = process.argv.slice(2);
const fd = fs.openSync('/dev/net/tun', 'r+');
libc.ioctl(fd, TUNSETIFF, ifreq(tap, IFF_TAP | IFF_NO_PI));
const myMac = Buffer.from(mac.split(':').map((h) => parseInt(h, 16)));
const myIp = Buffer.from(ip.split('.').map(Number));
let echoes = 0;

function checksum(b: Buffer): number {
  let sum = 0;
  for (let i = 0; i + 1 < b.length; i += 2) sum += b.readUInt16BE(i);
  if (b.length % 2) sum += b[b.length - 1] << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return ~sum & 0xffff;
}

function handle(f: Buffer): void {
  if (process.env.TAP_GUEST_DEBUG) process.stderr.write(`frame ${f.length} type ${f.readUInt16BE(12).toString(16)}\n`);
  if (f.length < 42) return;
  const type = f.readUInt16BE(12);
  if (type === 0x0806 && f.readUInt16BE(20) === 1 && f.subarray(38, 42).equals(myIp)) {
    const r = Buffer.alloc(42);
    f.copy(r, 0, 6, 12); // to the asker
    myMac.copy(r, 6);
    r.writeUInt16BE(0x0806, 12);
    r.writeUInt16BE(1, 14); // ethernet
    r.writeUInt16BE(0x0800, 16);
    r[18] = 6;
    r[19] = 4;
    r.writeUInt16BE(2, 20); // reply
    myMac.copy(r, 22);
    myIp.copy(r, 28);
    f.copy(r, 32, 22, 32); // their MAC and IP
    fs.writeSync(fd, r);
    return;
  }
  if (type !== 0x0800) return;
  const ihl = (f[14] & 0x0f) * 4;
  const total = f.readUInt16BE(16);
  if (f[23] !== 1 || !f.subarray(30, 34).equals(myIp) || f[14 + ihl] !== 8) return;
  const r = Buffer.from(f.subarray(0, 14 + total));
  f.copy(r, 0, 6, 12);
  myMac.copy(r, 6);
  f.copy(r, 26, 30, 34); // source ← their destination (us)
  f.copy(r, 30, 26, 30); // destination ← their source
  r[22] = 64;
  r.writeUInt16BE(0, 24);
  r.writeUInt16BE(checksum(r.subarray(14, 14 + ihl)), 24);
  r[14 + ihl] = 0; // echo reply
  r.writeUInt16BE(0, 14 + ihl + 2);
  r.writeUInt16BE(checksum(r.subarray(14 + ihl, 14 + total)), 14 + ihl + 2);
  fs.writeSync(fd, r);
  process.stdout.write(`icmp ${++echoes}\n`);
}

const buf = Buffer.alloc(65536);
function loop(): void {
  fs.read(fd, buf, 0, buf.length, null, (err, n) => {
    if (err) process.exit(1);
    handle(buf.subarray(0, n));
    loop();
  });
}
process.stdout.write('ready\n');
loop();
