// NRI message types, from proto/nri/api.proto.
import protobuf from 'protobufjs';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';

const root = protobuf.loadSync(path.join(packageRoot(), 'proto/nri/api.proto'));
export const PLUGIN_SERVICE = 'nri.pkg.api.v1alpha1.Plugin';
export const RUNTIME_SERVICE = 'nri.pkg.api.v1alpha1.Runtime';

export const nriType = (name: string): protobuf.Type => root.lookupType(`nri.pkg.api.v1alpha1.${name}`);

export function decode<T>(type: string, b: Buffer): T {
  const t = nriType(type);
  return t.toObject(t.decode(b), { defaults: true, enums: String, longs: Number }) as T;
}

export function encode(type: string, obj: object): Buffer {
  const t = nriType(type);
  return Buffer.from(t.encode(t.fromObject(obj)).finish());
}

export interface NriPod {
  id: string;
  name: string;
  uid: string;
  namespace: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  runtimeHandler: string;
  linux?: { namespaces: { type: string; path: string }[]; cgroupParent?: string };
  ips: string[];
}

/** The pod events kni subscribes to: bit (event - 1) per event. */
export const EVENT_MASK = (1 << 0) | (1 << 1) | (1 << 2); // RUN, STOP, REMOVE_POD_SANDBOX = 0x7
