// The pod annotation that asks for secondary networks (k8s.v1.cni.cncf.io/networks, the
// Network Plumbing WG's multi-net spec as Multus reads it), in both forms:
//   "ns/name@ifname, other"                        (text: namespace and interface optional)
//   [{"name":"x","namespace":"ns","interface":"net5","ips":["10.1.1.5/24"],"mac":"…",
//     "default-route":["10.1.1.1"],"cni-args":{…},"portMappings":[…],"bandwidth":{…},
//     "infiniband-guid":"…","deviceID":"0000:03:02.3"}]
// (and "interfaceRequest", the name of "interface" before Multus 3.2, which Multus still reads)
// Checked whole: a bad annotation fails the attach with every problem named.
import net from 'node:net';
import { bandwidthOf, portMappingOf } from '../cni/capability-fields';

export const NETWORKS_ANNOTATION = 'k8s.v1.cni.cncf.io/networks';
export const NETWORK_STATUS_ANNOTATION = 'k8s.v1.cni.cncf.io/network-status';
/** Multus's: the definition a pod takes as its default network instead of the node's. */
export const DEFAULT_NETWORK_ANNOTATION = 'v1.multus-cni.io/default-network';
/** Where a default network named without a namespace is looked up (Multus's own namespace, kube-system by default). */
export const DEFAULT_NETWORK_NAMESPACE = 'kube-system';

/** What one selection asks of its attachment, besides the network and the interface (the annotation's fields). */
export interface SelectionFields {
  ips?: string[];
  mac?: string;
  defaultRoute?: string[];
  cniArgs?: Record<string, unknown>;
  portMappings?: unknown[];
  bandwidth?: unknown;
  /** An InfiniBand GUID for the attachment (the infinibandGUID capability). */
  infinibandGuid?: string;
  /** A device for the attachment, named by the pod (the deviceID capability). */
  deviceId?: string;
}

export interface NetworkSelection extends SelectionFields {
  namespace: string;
  name: string;
  /** The pod interface: as asked, else net<position> (net1 for the first selection). */
  interface: string;
}

export class SelectionError extends Error {}

export const MAX_SELECTIONS = 32;
/** Kubernetes object names: a namespace (DNS label) and a definition's name (DNS subdomain). */
export const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
export const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const JSON_KEYS = new Set(['name', 'namespace', 'interface', 'interfaceRequest', 'ips', 'mac', 'default-route', 'cni-args', 'portMappings', 'bandwidth', 'infiniband-guid', 'deviceID']);
/** An InfiniBand GUID: eight hex pairs (the form ib-sriov-cni and Multus read). */
const GUID = /^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){7}$/;
/** A device id as device plugins name them (a PCI address, an auxiliary device's name): no white space, not overlong. */
const DEVICE_ID = /^[^\s\x00-\x1f\x7f]{1,253}$/;

export const networkKey = (s: { namespace: string; name: string }): string => `${s.namespace}/${s.name}`;

/** A pod interface name the kernel takes (IFNAMSIZ, no '/', ':', white space or control character, not . or ..). */
export function isInterfaceName(s: string): boolean {
  return s.length > 0 && s.length < 16 && s !== '.' && s !== '..' && !/[/:\s\x00-\x1f\x7f%]/.test(s);
}

/**
 * The selections of a pod's annotation (absent or blank: none). podNamespace is the default
 * namespace. `before`: the networks the pod gets ahead of these (networks.everyPod): their
 * interfaces are taken, and an interface not named is net<N> counted after them, as Multus
 * counts its delegates.
 */
export function parseNetworkSelections(annotation: string | undefined, podNamespace: string, defaultInterface = 'eth0', key = NETWORKS_ANNOTATION, before: Pick<NetworkSelection, 'interface'>[] = []): NetworkSelection[] {
  if (annotation === undefined || annotation.trim() === '') return [];
  if (annotation.length > 65536) throw new SelectionError(`annotation ${key} is longer than 64 KiB`);
  const problems: string[] = [];
  const trimmed = annotation.trim();
  const out: (Omit<NetworkSelection, 'interface'> & { interface?: string })[] = [];
  if (trimmed.startsWith('[')) {
    let list: unknown;
    try {
      list = JSON.parse(trimmed);
    } catch (e) {
      throw new SelectionError(`annotation ${key} is not valid JSON: ${(e as Error).message}`);
    }
    if (!Array.isArray(list)) throw new SelectionError(`annotation ${key} must be a JSON list`);
    list.forEach((el, i) => {
      const at = `${key}[${i}]`;
      if (typeof el !== 'object' || el === null || Array.isArray(el)) return void problems.push(`${at} is not an object`);
      const e = el as Record<string, unknown>;
      const unknown = Object.keys(e).filter((k) => !JSON_KEYS.has(k));
      if (unknown.length) problems.push(`${at}: kni does not support ${unknown.map((k) => JSON.stringify(k)).join(', ')}`);
      const s: Omit<NetworkSelection, 'interface'> & { interface?: string } = { namespace: podNamespace, name: '' };
      if (typeof e.name !== 'string') problems.push(`${at}.name must be a string`);
      else s.name = e.name;
      if (e.namespace !== undefined && e.namespace !== '') {
        if (typeof e.namespace !== 'string') problems.push(`${at}.namespace must be a string`);
        else s.namespace = e.namespace;
      }
      if (e.interface !== undefined && e.interface !== '') {
        if (typeof e.interface !== 'string') problems.push(`${at}.interface must be a string`);
        else s.interface = e.interface;
      }
      // As Multus: the old name counts only when the new one is not given.
      if (e.interfaceRequest !== undefined && e.interfaceRequest !== '') {
        if (typeof e.interfaceRequest !== 'string') problems.push(`${at}.interfaceRequest must be a string`);
        else if (s.interface === undefined) s.interface = e.interfaceRequest;
      }
      if (e.ips !== undefined) {
        if (!Array.isArray(e.ips) || e.ips.some((x) => typeof x !== 'string' || !isIpOrCidr(x))) problems.push(`${at}.ips must list addresses (10.1.1.5 or 10.1.1.5/24)`);
        else if (e.ips.length) s.ips = e.ips as string[];
      }
      if (e.mac !== undefined && e.mac !== '') {
        if (typeof e.mac !== 'string' || !/^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/.test(e.mac)) problems.push(`${at}.mac must be six hex pairs like c2:11:22:33:44:55`);
        else s.mac = e.mac.toLowerCase();
      }
      if (e['default-route'] !== undefined) {
        const d = e['default-route'];
        if (!Array.isArray(d) || d.some((x) => typeof x !== 'string' || net.isIP(x) === 0)) problems.push(`${at}.default-route must list gateway addresses`);
        else if (d.length) s.defaultRoute = d as string[];
      }
      if (e['cni-args'] !== undefined && e['cni-args'] !== null) {
        const c = e['cni-args'];
        if (typeof c !== 'object' || Array.isArray(c)) problems.push(`${at}.cni-args must be an object`);
        else s.cniArgs = c as Record<string, unknown>;
      }
      if (e.portMappings !== undefined) {
        if (!Array.isArray(e.portMappings)) problems.push(`${at}.portMappings must be a list`);
        else if (e.portMappings.length) s.portMappings = e.portMappings.map(portMappingOf);
      }
      if (e.bandwidth !== undefined && e.bandwidth !== null) {
        if (typeof e.bandwidth !== 'object' || Array.isArray(e.bandwidth)) problems.push(`${at}.bandwidth must be an object`);
        else s.bandwidth = bandwidthOf(e.bandwidth);
      }
      if (e['infiniband-guid'] !== undefined && e['infiniband-guid'] !== '') {
        const g = e['infiniband-guid'];
        if (typeof g !== 'string' || !GUID.test(g)) problems.push(`${at}.infiniband-guid must be eight hex pairs like 24:8a:07:03:00:8d:ae:2e`);
        else s.infinibandGuid = g.toLowerCase();
      }
      if (e.deviceID !== undefined && e.deviceID !== '') {
        if (typeof e.deviceID !== 'string' || !DEVICE_ID.test(e.deviceID)) problems.push(`${at}.deviceID must be a device id (1 to 253 characters, no white space), like 0000:03:02.3`);
        else s.deviceId = e.deviceID;
      }
      out.push(s);
    });
  } else {
    trimmed.split(',').forEach((item, i) => {
      const at = `${key} item ${i + 1}`;
      const m = /^(?:([^/@]*)\/)?([^/@]*)(?:@(.*))?$/.exec(item.trim());
      if (!m) return void problems.push(`${at} ${JSON.stringify(item.trim().slice(0, 80))} is not [namespace/]name[@interface]`);
      const s: Omit<NetworkSelection, 'interface'> & { interface?: string } = { namespace: m[1] ?? podNamespace, name: m[2] };
      if (m[3] !== undefined) s.interface = m[3];
      out.push(s);
    });
  }
  if (out.length > MAX_SELECTIONS) problems.push(`${out.length} networks asked for; at most ${MAX_SELECTIONS}`);
  const seen = new Set<string>([defaultInterface, ...before.map((b) => b.interface)]);
  const selections = out.map((s, i) => {
    const at = `${key} ${JSON.stringify(s.name)}`;
    if (!DNS_SUBDOMAIN.test(s.name)) problems.push(`${at}: the network name must be a lower-case DNS subdomain`);
    if (!DNS_LABEL.test(s.namespace)) problems.push(`${at}: namespace ${JSON.stringify(s.namespace.slice(0, 80))} is not a namespace name`);
    const ifName = s.interface ?? `net${before.length + i + 1}`;
    if (!isInterfaceName(ifName)) problems.push(`${at}: interface ${JSON.stringify(ifName.slice(0, 80))} is not an interface name (1 to 15 characters, no / : or spaces)`);
    else if (seen.has(ifName)) problems.push(`${at}: interface ${ifName} is used twice`);
    seen.add(ifName);
    return { ...s, interface: ifName };
  });
  if (problems.length) throw new SelectionError(problems.join('; '));
  return selections;
}

/** networks.everyPod as selections: a name alone is looked up in kube-system, as Multus looks up its defaultNetworks. */
export function parseEveryPod(entries: string[], defaultInterface = 'eth0'): NetworkSelection[] {
  if (!entries.length) return [];
  if (entries.some((e) => e.includes(','))) throw new SelectionError('networks.everyPod: one network per entry');
  return parseNetworkSelections(entries.join(','), DEFAULT_NETWORK_NAMESPACE, defaultInterface, 'networks.everyPod');
}

function isIpOrCidr(s: string): boolean {
  const [ip, prefix, extra] = s.split('/');
  if (extra !== undefined || net.isIP(ip) === 0) return false;
  if (prefix === undefined) return true;
  const max = net.isIP(ip) === 4 ? 32 : 128;
  return /^\d{1,3}$/.test(prefix) && Number(prefix) <= max;
}

/**
 * The network a pod takes as its default network (DEFAULT_NETWORK_ANNOTATION), in either form
 * of the networks annotation: exactly one; a name alone is looked up in kube-system, as Multus
 * does. Its interface is the runtime's (ifName): another one named is refused, and so is
 * default-route (the default network's interface carries the default route anyway).
 */
export function parseDefaultNetwork(annotation: string | undefined, ifName: string): NetworkSelection | undefined {
  const key = DEFAULT_NETWORK_ANNOTATION;
  const list = parseNetworkSelections(annotation, DEFAULT_NETWORK_NAMESPACE, '', key);
  if (!list.length) return undefined;
  if (list.length > 1) throw new SelectionError(`annotation ${key} names ${list.length} networks; a pod has one default network`);
  const trimmed = annotation!.trim();
  const el = trimmed.startsWith('[') ? (JSON.parse(trimmed)[0] as { interface?: unknown; interfaceRequest?: unknown }) : undefined;
  const named = el ? el.interface || el.interfaceRequest : /@(.*)$/.exec(trimmed)?.[1];
  if (named !== undefined && named !== '' && named !== ifName) throw new SelectionError(`annotation ${key}: the default network's interface is the one the runtime names (${ifName}), not ${JSON.stringify(named)}`);
  if (list[0].defaultRoute) throw new SelectionError(`annotation ${key}: default-route does not apply (the default network's interface carries the default route)`);
  return { ...list[0], interface: ifName };
}
