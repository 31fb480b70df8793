// Validation of everything a caller hands the core. Each failure names the field and why.
import path from 'node:path';
import { invalid } from './errors';
import { Family, parseIp } from '../ipam/ip';
import type { PortMapping } from '../node/host-ports';
import type { Bandwidth } from '../pod/bandwidth';

/** A value quoted in an error message, cut short: callers may send megabytes. */
const q = (v: string): string => JSON.stringify(v.length > 64 ? `${v.slice(0, 64)}…` : v);

const SANDBOX_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
export const MAX_ID = 128;

export function sandboxId(id: unknown, field = 'sandbox id'): string {
  if (typeof id !== 'string' || id.length === 0) throw invalid(`${field} is empty`);
  if (id.length > MAX_ID) throw invalid(`${field} is ${id.length} characters long (at most ${MAX_ID})`);
  if (!SANDBOX_ID.test(id)) {
    throw invalid(`${field} ${q(id)} has characters other than letters, digits, '_', '.', '-' or does not start with a letter or digit`);
  }
  return id;
}

/** Interface names as the kernel accepts them (dev_valid_name), at most 15 bytes. */
export function interfaceName(name: unknown, field = 'interface name'): string {
  if (typeof name !== 'string' || name.length === 0) throw invalid(`${field} is empty`);
  const bytes = Buffer.byteLength(name);
  if (bytes > 15) throw invalid(`${field} ${q(name)} is ${bytes} bytes long (at most 15)`);
  if (name === '.' || name === '..' || /[\/:\s\x00-\x1f\x7f]/.test(name)) {
    throw invalid(`${field} ${q(name)} is not a valid interface name (no '/', ':', white space or control characters)`);
  }
  return name;
}

/**
 * Pod names, namespaces and uids as a runtime hands them over. CRI puts no format on
 * PodSandboxMetadata (containerd and the reference plugins take any string; critest and crictl
 * use capitals), so neither does kni beyond what keeps its own use safe: at most 253 bytes, no
 * control character (they would reach logs and an operator's terminal), no '/' (kni keys pods by
 * "namespace/name"). Where kni writes a Kubernetes object by that name, isObjectName decides.
 */
export function objectName(value: unknown, field: string, required = false): string {
  if (value === undefined || value === null || value === '') {
    if (required) throw invalid(`${field} is empty`);
    return '';
  }
  if (typeof value !== 'string') throw invalid(`${field} is not a string`);
  const bytes = Buffer.byteLength(value);
  if (bytes > 253) throw invalid(`${field} is ${bytes} bytes long (at most 253)`);
  if (/[\x00-\x1f\x7f-\x9f/]/.test(value)) throw invalid(`${field} ${q(value)} has a control character or '/'`);
  return value;
}

/** A Kubernetes object name (DNS-1123 subdomain): what kni may write to the API server by. */
export const isObjectName = (value: string): boolean => value.length <= 253 && /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/.test(value);

/** Labels and annotations: Kubernetes caps all annotations of an object at 256 KiB. */
export const MAX_MAP_BYTES = 256 * 1024;

export function stringMap(m: unknown, field: string): Record<string, string> {
  if (m === undefined || m === null) return {};
  if (typeof m !== 'object' || Array.isArray(m)) throw invalid(`${field} is not a map`);
  let bytes = 0;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(m as Record<string, unknown>)) {
    if (typeof v !== 'string') throw invalid(`${field}[${q(k)}] is not a string`);
    bytes += Buffer.byteLength(k) + Buffer.byteLength(v);
    if (bytes > MAX_MAP_BYTES) throw invalid(`${field} is larger than ${MAX_MAP_BYTES} bytes`);
    out[k] = v;
  }
  return out;
}

/**
 * The form of a netns path a caller hands us: absolute and normalised. Where it leads (the
 * allowed roots, a netns, not the node's) is checked on the opened file (netns/open-netns.ts).
 */
/** The kernel's sun_path holds 108 bytes, the last a NUL. */
export const MAX_SOCKET_PATH_BYTES = 107;

/**
 * What is wrong with a unix socket path, or '' when nothing is. A longer path is not refused by
 * Node: libuv cuts it to what sun_path holds, so a daemon would serve, and a client connect, at
 * a path nobody named (measured here with a 124-byte path: a socket file of 103 bytes appeared).
 */
export function socketPathProblem(p: unknown, what: string): string {
  if (typeof p !== 'string') return `${what} must be a string`;
  if (p.includes('\0')) return `${what} is not a valid path`;
  if (!path.isAbsolute(p)) return `${what} ${JSON.stringify(p)} must be an absolute path`;
  const n = Buffer.byteLength(p);
  return n > MAX_SOCKET_PATH_BYTES ? `${what} is ${n} bytes long; a unix socket path holds at most ${MAX_SOCKET_PATH_BYTES}` : '';
}

export function netnsPath(p: unknown, field = 'netns path'): string {
  if (typeof p !== 'string' || p.length === 0) throw invalid(`${field} is empty`);
  if (p.length > 4096 || p.includes('\0')) throw invalid(`${field} is not a valid path`);
  if (!path.isAbsolute(p)) throw invalid(`${field} ${q(p)} is not absolute`);
  if (path.normalize(p) !== p || p.endsWith('/')) throw invalid(`${field} ${q(p)} is not normalised (no '..', '.', '//' or trailing '/')`);
  return p;
}

/** Requested pod addresses: "10.1.2.3" or "10.1.2.3/24" (the prefix is the range's anyway), one per family. */
export function requestedIps(v: unknown): { family: Family; value: bigint }[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.length > 2) throw invalid('requested IPs must be a list of at most two addresses (one per family)');
  const out: { family: Family; value: bigint }[] = [];
  for (const s of v) {
    if (typeof s !== 'string' || s.length > 64) throw invalid(`requested IP ${JSON.stringify(s)} is not an address`);
    let ip;
    try {
      ip = parseIp(s.split('/')[0]);
    } catch {
      throw invalid(`requested IP ${JSON.stringify(s)} is not an address`);
    }
    if (out.some((o) => o.family === ip.family)) throw invalid(`two IPv${ip.family} addresses requested: at most one per family`);
    out.push(ip);
  }
  return out;
}

/** A unicast MAC as six hex pairs ("c2:11:22:33:44:55"), lower-cased. */
export function requestedMac(v: unknown): string | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string' || !/^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$/.test(v)) throw invalid(`requested MAC ${JSON.stringify(v)} is not six hex pairs like c2:11:22:33:44:55`);
  const mac = v.toLowerCase();
  if (parseInt(mac.slice(0, 2), 16) & 1) throw invalid(`requested MAC ${mac} is a multicast address`);
  if (mac === '00:00:00:00:00:00') throw invalid('requested MAC 00:00:00:00:00:00 is not an address');
  return mac;
}

/**
 * The pod's cgroup parent: a cgroupfs path (/kubepods/besteffort/pod…) or a systemd slice
 * (kubepods-besteffort-pod….slice), as runtimes pass it; kni only hands it on.
 */
export function cgroupParent(v: unknown): string | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string' || v.length > 4096 || /[\0-\x1f\x7f]/.test(v)) throw invalid(`cgroup parent ${JSON.stringify(String(v).slice(0, 80))} is not a cgroup path or slice (text up to 4096 characters, no control characters)`);
  return v;
}

const PROTOCOLS = ['tcp', 'udp', 'sctp'];

/** Port mappings as entry points hand them over (protocol in any case; '' or absent = tcp). */
export function portMappings(v: unknown): PortMapping[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.length > 256) throw invalid('port mappings must be a list of at most 256 entries');
  const port = (x: unknown, what: string): number => {
    if (!Number.isInteger(x) || (x as number) < 1 || (x as number) > 65535) throw invalid(`port mapping ${what} ${JSON.stringify(x)} is not a port from 1 to 65535`);
    return x as number;
  };
  const out: PortMapping[] = [];
  for (const m of v as Record<string, unknown>[]) {
    if (typeof m !== 'object' || m === null) throw invalid('a port mapping is not an object');
    // CRI lists every container port; only those with a host port are mappings (as containerd
    // hands CNI only those).
    if (m.hostPort === 0 || m.hostPort === undefined || m.hostPort === null) continue;
    const protocol = String(m.protocol ?? '').toLowerCase() || 'tcp';
    if (!PROTOCOLS.includes(protocol)) throw invalid(`port mapping protocol ${JSON.stringify(m.protocol)} is not tcp, udp or sctp`);
    const hostIp = typeof m.hostIp === 'string' ? m.hostIp : '';
    if (hostIp && hostIp !== '0.0.0.0' && hostIp !== '::') {
      try {
        parseIp(hostIp);
      } catch {
        throw invalid(`port mapping hostIP ${JSON.stringify(hostIp)} is not an address`);
      }
    }
    const mapping: PortMapping = { protocol: protocol as PortMapping['protocol'], containerPort: port(m.containerPort, 'containerPort'), hostPort: port(m.hostPort, 'hostPort'), hostIp: hostIp === '0.0.0.0' || hostIp === '::' ? '' : hostIp };
    if (out.some((o) => o.hostPort === mapping.hostPort && o.protocol === mapping.protocol && o.hostIp === mapping.hostIp)) throw invalid(`host port ${mapping.protocol}/${mapping.hostPort} is mapped twice`);
    out.push(mapping);
  }
  return out;
}

export const INGRESS_BANDWIDTH = 'kubernetes.io/ingress-bandwidth';
export const EGRESS_BANDWIDTH = 'kubernetes.io/egress-bandwidth';
const MIN_RATE = 1000;
const MAX_RATE = 1e15;
const SUFFIX: Record<string, number> = { '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50 };

/** A Kubernetes quantity of bits per second ("10M", "1Gi", "500k"), as the bandwidth annotations hold. */
export function bitRate(v: string, what: string): number {
  const m = /^([0-9]+(?:\.[0-9]+)?)(k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$/.exec(v.trim());
  if (!m) throw invalid(`${what} ${q(v)} is not a quantity like 10M or 1Gi`);
  const bits = Number(m[1]) * SUFFIX[m[2] ?? ''];
  if (!(bits >= MIN_RATE && bits <= MAX_RATE)) throw invalid(`${what} ${q(v)} is outside 1k to 1P bits per second`);
  return Math.floor(bits);
}

/**
 * The pod's bandwidth limits: the CNI bandwidth capability when given (bits/s and bits), else
 * the pod annotations. undefined: no limit.
 */
export function bandwidth(explicit: unknown, annotations: Record<string, string>): Bandwidth | undefined {
  const out: Bandwidth = {};
  if (explicit !== undefined && explicit !== null) {
    if (typeof explicit !== 'object' || Array.isArray(explicit)) throw invalid('bandwidth must be an object of rates and bursts');
    const e = explicit as Record<string, unknown>;
    for (const k of ['ingressRate', 'ingressBurst', 'egressRate', 'egressBurst'] as const) {
      const x = e[k];
      if (x === undefined || x === null || x === 0) continue;
      const rate = k.endsWith('Rate');
      if (typeof x !== 'number' || !Number.isFinite(x) || x < (rate ? MIN_RATE : 1) || x > (rate ? MAX_RATE : 2 ** 35)) throw invalid(`bandwidth ${k} ${JSON.stringify(x)} is out of range (${rate ? 'rates: 1000 to 1e15 bits/s' : 'bursts: 1 to 2^35 bits'})`);
      out[k] = Math.floor(x);
    }
  } else {
    if (annotations[INGRESS_BANDWIDTH] !== undefined) out.ingressRate = bitRate(annotations[INGRESS_BANDWIDTH], `annotation ${INGRESS_BANDWIDTH}`);
    if (annotations[EGRESS_BANDWIDTH] !== undefined) out.egressRate = bitRate(annotations[EGRESS_BANDWIDTH], `annotation ${EGRESS_BANDWIDTH}`);
  }
  return out.ingressRate || out.egressRate ? out : undefined;
}
