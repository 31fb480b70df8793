// Validation of everything a caller hands the core. Each failure names the field and why.
import path from 'node:path';
import { invalid } from './errors';

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

/** Pod names and namespaces: Kubernetes object names, at most 253 characters. */
export function objectName(value: unknown, field: string, required = false): string {
  if (value === undefined || value === null || value === '') {
    if (required) throw invalid(`${field} is empty`);
    return '';
  }
  if (typeof value !== 'string') throw invalid(`${field} is not a string`);
  if (value.length > 253) throw invalid(`${field} is ${value.length} characters long (at most 253)`);
  if (!/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/.test(value)) {
    throw invalid(`${field} ${q(value)} is not a valid Kubernetes name (lower case letters, digits, '-', '.')`);
  }
  return value;
}

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
export function netnsPath(p: unknown, field = 'netns path'): string {
  if (typeof p !== 'string' || p.length === 0) throw invalid(`${field} is empty`);
  if (p.length > 4096 || p.includes('\0')) throw invalid(`${field} is not a valid path`);
  if (!path.isAbsolute(p)) throw invalid(`${field} ${q(p)} is not absolute`);
  if (path.normalize(p) !== p || p.endsWith('/')) throw invalid(`${field} ${q(p)} is not normalised (no '..', '.', '//' or trailing '/')`);
  return p;
}
