// The vxlan device of the overlay backend. Every node derives each peer's device MAC from the
// peer's underlay address (vtepMac), so nothing has to be published on the Node object: the
// FDB and neighbour entries can be written from the Node list alone.
import crypto from 'node:crypto';
import os from 'node:os';
import { log } from '../core/log';
import { Family, parseIp } from '../ipam/ip';
import { IFF_UP, linkByIndex, linkByName, linkDel, linkSetAlias, linkSetUp, vxlanAdd } from '../netlink/link';
import { NetlinkSocket } from '../netlink/socket';
import { VxlanConfig } from '../core/config';
import { setTxChecksumming, txChecksumming } from '../sys/ethtool';

/** IPv4 outer header 20 + UDP 8 + vxlan 8 + inner Ethernet 14; IPv6 outer header is 40. */
export const vxlanOverhead = (underlay: Family): number => (underlay === 4 ? 50 : 70);

/** A locally administered unicast MAC that only this underlay address yields. */
export function vtepMac(underlayIp: string): string {
  const h = crypto.createHash('sha256').update(`kni-vtep/${underlayIp}`).digest();
  return ['0e', ...[...h.subarray(0, 5)].map((b) => b.toString(16).padStart(2, '0'))].join(':');
}

/**
 * Whether the device's transmit checksum offload should be on (undefined: as it is). "auto" is
 * off before Linux 5.7, where an outer UDP checksum after NAT (kube-proxy's, to a NodePort or a
 * Service on another node) came out wrong and the receiver dropped the packet.
 */
export function txChecksumWanted(setting: VxlanConfig['txChecksumOffload'], release = os.release()): boolean | undefined {
  if (setting !== 'auto') return setting;
  const [major, minor] = release.split('.').map((x) => parseInt(x, 10));
  return major < 5 || (major === 5 && minor < 7) ? false : undefined;
}

let txChecksumFailure = '';

/**
 * The device's transmit checksum offload as the config wants it; a change is logged. A kernel
 * refusing it costs a warning (once until it changes), never the overlay's routes.
 */
function applyTxChecksum(sock: NetlinkSocket, cfg: VxlanConfig): void {
  const want = txChecksumWanted(cfg.txChecksumOffload);
  try {
    if (want === undefined || txChecksumming(sock.fd, cfg.device) === want) return;
    setTxChecksumming(sock.fd, cfg.device, want);
    txChecksumFailure = '';
    log('info', `vxlan device transmit checksum offload turned ${want ? 'on' : 'off'}`, { device: cfg.device, setting: String(cfg.txChecksumOffload), kernel: os.release() });
  } catch (e) {
    const why = (e as Error).message;
    if (why !== txChecksumFailure) log('warn', `cannot turn the vxlan device's transmit checksum offload ${want ? 'on' : 'off'}`, { device: cfg.device, error: why });
    txChecksumFailure = why;
  }
}

export interface VxlanDevice {
  index: number;
  name: string;
  mtu: number;
  underlay: Family;
}

/**
 * The device as the config and this node's underlay address want it: made if missing, made
 * again if its settings (recorded in its alias) differ, set up if down, its transmit checksum
 * offload set as the config says (every sync: put back if changed behind kni's back). Returns it with its MTU, which is the
 * underlay link's less the encapsulation.
 */
export function ensureVxlanDevice(sock: NetlinkSocket, cfg: VxlanConfig, localIp: string, underlayIndex: number): VxlanDevice {
  const local = parseIp(localIp);
  const underlay = linkByIndex(sock, underlayIndex);
  if (!underlay) throw new Error(`the underlay link (index ${underlayIndex}) of ${localIp} is gone`);
  const mtu = underlay.mtu - vxlanOverhead(local.family);
  const want = `kni:vxlan vni=${cfg.vni} port=${cfg.port} local=${localIp} link=${underlay.name} mtu=${mtu}`;
  let dev = linkByName(sock, cfg.device);
  if (dev && (dev.kind !== 'vxlan' || dev.alias !== want)) {
    if (dev.kind !== 'vxlan') throw new Error(`${cfg.device} exists and is a ${dev.kind || 'non-vxlan'} link, not kni's vxlan device`);
    sock.request(linkDel(cfg.device, dev.index));
    dev = undefined;
  }
  if (!dev) {
    sock.request(vxlanAdd({ name: cfg.device, vni: cfg.vni, port: cfg.port, mtu, mac: vtepMac(localIp), underlayIndex, local }));
    dev = linkByName(sock, cfg.device)!;
    sock.request(linkSetAlias(dev.index, cfg.device, want));
  } else if (!(dev.flags & IFF_UP)) {
    // Set down behind kni's back (the routes through it went with it): up again, and the sync
    // puts the routes and neighbours back.
    sock.request(linkSetUp(cfg.device));
  }
  applyTxChecksum(sock, cfg);
  return { index: dev.index, name: cfg.device, mtu, underlay: local.family };
}

export function removeVxlanDevice(sock: NetlinkSocket, name: string): boolean {
  const dev = linkByName(sock, name);
  if (!dev || dev.kind !== 'vxlan') return false;
  sock.request(linkDel(name, dev.index));
  return true;
}
