// Device information files (the Network Plumbing WG's device-info spec), as Multus handles them
// for a network that took a device: the device plugin leaves <dir>/dp/<resource>-<device>-device.json;
// before the plugins' ADD it is copied to the attachment's own <dir>/cni/<file>, whose path
// the plugins get as the CNIDeviceInfoFile capability (SR-IOV CNI may add to it); after ADD it
// is read into the Pod's network-status ("device-info"), where a DPDK app finds its VF's PCI
// address; DEL removes it. Only attachments with a device touch these files. A device the pod
// names itself (its selection's deviceID) has no device plugin's file: the path is the plugins'.
import fs from 'node:fs';
import path from 'node:path';

const MAX_BYTES = 64 << 10;

/** The attachment's file name, as Multus names it ("/" of the network key made "-"). */
export const cniDeviceInfoName = (network: string, containerId: string, ifName: string): string =>
  `${network}-${containerId}_${ifName}`.replaceAll('/', '-');

export const cniDeviceInfoPath = (dir: string, network: string, containerId: string, ifName: string): string =>
  path.join(dir, 'cni', cniDeviceInfoName(network, containerId, ifName));

export const devicePluginInfoPath = (dir: string, resource: string, deviceId: string): string =>
  path.join(dir, 'dp', `${resource.replaceAll('/', '-')}-${deviceId.replaceAll('/', '-')}-device.json`);

/** The device plugin's file for this device, copied to the attachment's; false when it left none. */
export function copyFromDevicePlugin(dir: string, resource: string, deviceId: string, to: string): boolean {
  let text: string;
  try {
    text = fs.readFileSync(devicePluginInfoPath(dir, resource, deviceId), 'utf8');
  } catch {
    return false;
  }
  if (text.length > MAX_BYTES) return false;
  makeDeviceInfoDir(to);
  fs.writeFileSync(to, text, { mode: 0o444 });
  return true;
}

/** The directory of an attachment's file, made for a plugin that writes the file itself (a device the pod named). */
export function makeDeviceInfoDir(file: string): void {
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 });
}

/** The attachment's device information: a JSON object naming its type, else undefined (absent, too large, not that). */
export function readDeviceInfo(file: string): Record<string, unknown> | undefined {
  try {
    const text = fs.readFileSync(file, 'utf8');
    if (text.length > MAX_BYTES) return undefined;
    const info = JSON.parse(text) as unknown;
    return typeof info === 'object' && info !== null && !Array.isArray(info) && typeof (info as { type?: unknown }).type === 'string' ? (info as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

export function removeDeviceInfo(file: string): void {
  fs.rmSync(file, { force: true });
}
