// A link's transmit checksumming, as `ethtool -K <dev> tx off|on` sets it: the legacy ethtool
// ioctl (ETHTOOL_GTXCSUM / ETHTOOL_STXCSUM), which every kernel kni runs on has; the ethtool
// netlink family came in 5.6, after the kernels that need this most. The ioctl goes through
// the caller's netlink socket, so the device is looked up in that socket's netns.
import * as libc from './libc';

const SIOCETHTOOL = 0x8946;
const ETHTOOL_GTXCSUM = 0x16;
const ETHTOOL_STXCSUM = 0x17;

function ethtoolValue(fd: number, device: string, cmd: number, data = 0): number {
  const v = Buffer.alloc(8); // struct ethtool_value { u32 cmd; u32 data; }
  v.writeUInt32LE(cmd, 0);
  v.writeUInt32LE(data, 4);
  libc.ioctlIfreqData(fd, SIOCETHTOOL, device, v);
  return v.readUInt32LE(4);
}

export const txChecksumming = (fd: number, device: string): boolean => ethtoolValue(fd, device, ETHTOOL_GTXCSUM) !== 0;

export function setTxChecksumming(fd: number, device: string, on: boolean): void {
  ethtoolValue(fd, device, ETHTOOL_STXCSUM, on ? 1 : 0);
}
