// A CNI network behind the backend interface: the default network's conflist
// (defaultNetwork.cni) or a network definition (NetworkAttachmentDefinition, file). The plugins
// do the wiring and the IPAM; the core keeps the record, rollback, release and the rest.
import path from 'node:path';
import { KniError } from './errors';
import { log } from './log';
import type { AttachmentRequest, DetachMode, NetworkBackend } from './network-backend';
import type { Config } from './config';
import { assignTap, unwireTap, wireTap } from './vm-tap';
import { CniNetwork, CniRuntime, convertResult } from '../cni/cni-network';
import { cniDeviceInfoName, cniDeviceInfoPath, copyFromDevicePlugin, makeDeviceInfoDir, readDeviceInfo, removeDeviceInfo } from '../cni/device-info';
import { CniPluginError } from '../cni/plugin-exec';
import { familyOf, formatIp } from '../ipam/ip';
import { AllocatedAddress } from '../ipam/ipam';
import { NetnsHandle } from '../netns/open-netns';
import { networkAttachments } from '../observe/metrics';
import { withSpan } from '../observe/tracing';
import { DnsSettings, InterfaceRecord, SandboxRecord } from '../store/records';

/** What the plugins get for an interface: CNI_ARGS as runtimes set them, and the capability args. */
export function cniRuntimeOf(rec: SandboxRecord, ifName: string, req?: AttachmentRequest): CniRuntime {
  const args = ['IgnoreUnknown=1', `K8S_POD_NAMESPACE=${rec.pod.namespace}`, `K8S_POD_NAME=${rec.pod.name}`, `K8S_POD_INFRA_CONTAINER_ID=${rec.id}`, `K8S_POD_UID=${rec.pod.uid}`].join(';');
  const capabilityArgs: Record<string, unknown> = { 'io.kubernetes.cri.pod-annotations': rec.annotations };
  if (req?.ports.length) capabilityArgs.portMappings = req.ports.map((m) => ({ hostPort: m.hostPort, containerPort: m.containerPort, protocol: m.protocol, ...(m.hostIp ? { hostIP: m.hostIp } : {}) }));
  if (req?.bandwidth) capabilityArgs.bandwidth = req.bandwidth;
  if (req?.ips.length) capabilityArgs.ips = req.ips.map((i) => i.text ?? formatIp(i.family, i.value));
  if (req?.mac) capabilityArgs.mac = req.mac;
  if (req?.device) capabilityArgs.deviceID = req.device.id;
  if (req?.infinibandGuid) capabilityArgs.infinibandGUID = req.infinibandGuid;
  if (rec.cgroupParent) capabilityArgs.cgroupPath = rec.cgroupParent;
  return { containerId: rec.id, netns: rec.netnsPath, ifName, args, capabilityArgs, ...(req?.cniArgs ? { cniArgs: req.cniArgs } : {}), ...(req?.device && !req.device.resource ? { podNamedDevice: true } : {}) };
}

/** The pod interface of a CNI result as kni records it (the interface's other fields are kept). */
export function fillFromResult(itf: InterfaceRecord, result: unknown, network: string): void {
  const r = (convertResult(result, '1.1.0') ?? {}) as { interfaces?: { name?: string; mac?: string; sandbox?: string; mtu?: number }[]; ips?: { address?: string; gateway?: string; interface?: number }[]; dns?: unknown };
  const itfs = r.interfaces ?? [];
  const podIndex = itfs.findIndex((i) => i.sandbox && i.name === itf.name);
  const pod = itfs[podIndex];
  itf.addresses = (r.ips ?? [])
    .filter((ip) => typeof ip.address === 'string' && (ip.interface === undefined || ip.interface === podIndex))
    .map((ip): AllocatedAddress => {
      const [address, prefix] = ip.address!.split('/');
      return { family: familyOf(address), address, prefixLength: Number(prefix), gateway: ip.gateway ?? '', range: `cni:${network}` };
    });
  itf.mac = pod?.mac ?? '';
  itf.mtu = pod?.mtu ?? 0;
  const dns = dnsOf(r.dns);
  if (dns) itf.dns = dns;
  else delete itf.dns;
}

/** A text a resolver could use: at most 253 characters (a DNS name's length; an address or option is shorter). */
const resolverText = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= 253;
const resolverList = (v: unknown): string[] => (Array.isArray(v) ? v.filter(resolverText).slice(0, 32) : []);

/**
 * A result's `dns` as kni keeps it, or undefined when it has none. A plugin's output is not
 * trusted: entries of the wrong type or size are left out (the addresses and the attach stand).
 */
export function dnsOf(raw: unknown): DnsSettings | undefined {
  if (!raw || typeof raw !== 'object') return undefined;
  const r = raw as Record<string, unknown>;
  const dns: DnsSettings = {};
  const nameservers = resolverList(r.nameservers);
  const search = resolverList(r.search);
  const options = resolverList(r.options);
  if (nameservers.length) dns.nameservers = nameservers;
  if (resolverText(r.domain)) dns.domain = r.domain;
  if (search.length) dns.search = search;
  if (options.length) dns.options = options;
  return Object.keys(dns).length ? dns : undefined;
}

const codeOf = (e: CniPluginError): KniError['code'] => (e.code === 11 || e.code === 50 ? 'UNAVAILABLE' : e.code === 4 || e.code === 7 ? 'INVALID_ARGUMENT' : 'INTERNAL');

/** A plugin's failure as the KniError callers answer with, naming the network. */
export function cniError(e: unknown, network: string, sandboxId: string): KniError {
  if (e instanceof KniError) return e;
  if (e instanceof CniPluginError) return new KniError(codeOf(e), `network ${network}: ${e.message}`);
  return new KniError('UNAVAILABLE', `sandbox ${sandboxId}, network ${network}: ${(e as Error).message}`);
}

export class CniBackend implements NetworkBackend {
  readonly kind = 'cni';

  /**
   * deviceInfoDir: where device information files are (for attachments with a device); cfg: the
   * daemon's config as it is now (vmTap changes live).
   */
  constructor(readonly network: CniNetwork, private readonly displayName = network.name, private readonly opts: { deviceInfoDir?: string; cfg?: Pick<Config, 'vmTap'> } = {}) {}

  get name(): string {
    return this.displayName;
  }

  reserve(rec: SandboxRecord, itf: InterfaceRecord): void {
    itf.backend = 'cni';
    itf.cniName = this.network.name;
    assignTap(this.opts.cfg?.vmTap ?? false, rec, itf);
  }

  async attach(rec: SandboxRecord, itf: InterfaceRecord, ns: NetnsHandle, req: AttachmentRequest): Promise<void> {
    const rt = cniRuntimeOf(rec, itf.name, req);
    // As Multus: the device plugin's information on the device, as the attachment's own file.
    const dir = this.opts.deviceInfoDir;
    const infoFile = req.device && dir ? cniDeviceInfoPath(dir, this.displayName, rec.id, itf.name) : '';
    if (infoFile) {
      try {
        // A device the pod named itself comes from no device plugin: the file is the plugins' to write.
        if (req.device!.resource) copyFromDevicePlugin(dir!, req.device!.resource, req.device!.id, infoFile);
        else makeDeviceInfoDir(infoFile);
      } catch (e) {
        log('warn', 'cannot prepare the device information file for the plugins', { sandbox: rec.id, interface: itf.name, file: infoFile, error: (e as Error).message });
      }
      rt.capabilityArgs!.CNIDeviceInfoFile = infoFile;
    }
    try {
      const result = await withSpan('cni.add', { 'kni.cni.network': this.network.name, 'kni.interface': itf.name }, () => this.network.add(rt));
      fillFromResult(itf, result, this.network.name);
    } catch (e) {
      networkAttachments.inc({ network: this.displayName, result: 'error' });
      if (infoFile) removeDeviceInfo(infoFile);
      throw cniError(e, this.displayName, rec.id);
    }
    networkAttachments.inc({ network: this.displayName, result: 'ok' });
    const info = infoFile ? readDeviceInfo(infoFile) : undefined;
    if (info) itf.deviceInfo = info;
    // A vm sandbox's tap joins whatever the plugins made (a veth end, a macvlan, a VF).
    if (itf.tap) wireTap(itf, ns);
  }

  /** The plugins' DEL, whatever the mode: what they made is theirs to undo, now (a vm sandbox's tap first, unless its netns goes). */
  async detach(rec: SandboxRecord, itf: InterfaceRecord, mode: DetachMode): Promise<void> {
    if (itf.tap && mode === 'now') unwireTap(rec, itf.tap);
    // CNI_ARGS and capability args come from ADD's cache entry, the device information file too.
    const infoFile = this.network.cachedCapability(rec.id, itf.name, 'CNIDeviceInfoFile');
    await withSpan('cni.del', { 'kni.cni.network': this.network.name, 'kni.interface': itf.name }, () => this.network.del({ containerId: rec.id, netns: rec.netnsPath, ifName: itf.name }));
    // Only a file of the name kni gives it: the cache is on disk, not to be trusted to name any file.
    if (typeof infoFile === 'string' && path.basename(infoFile) === cniDeviceInfoName(this.displayName, rec.id, itf.name)) removeDeviceInfo(infoFile);
  }

  async check(rec: SandboxRecord, itf: InterfaceRecord): Promise<string[]> {
    try {
      await this.network.check({ containerId: rec.id, netns: rec.netnsPath, ifName: itf.name });
      return [];
    } catch (e) {
      return [`${itf.name} (${this.displayName}): ${(e as Error).message}`];
    }
  }

  status(): Promise<void> {
    return this.network.status();
  }

  gc(valid: { containerId: string; ifName: string }[]): Promise<string[]> {
    return this.network.gc(valid);
  }
}
