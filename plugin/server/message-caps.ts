// Per-method caps on request size, checked on the raw bytes before protobufjs decodes them.
// grpc-js has one receive limit per server (4 MiB); decoding a legal 4 MiB request made of
// hundreds of thousands of map entries stalls the event loop for seconds, for every caller.
// Requests that carry pod labels and annotations (Kubernetes caps all annotations of an
// object at 256 KiB, labels likewise by practice) get 1 MiB; the live list of GarbageCollect
// (up to ~30 000 ids of 128 characters) keeps the server's 4 MiB; everything else is small.
import * as grpc from '@grpc/grpc-js';

export const TOO_LARGE = Symbol('request too large');
export interface TooLarge {
  [TOO_LARGE]: { bytes: number; cap: number };
}

const KIB = 1024;
export const DEFAULT_CAP = 64 * KIB;
export const METHOD_CAPS: Record<string, number> = {
  Attach: 1024 * KIB,
  AttachInterface: 1024 * KIB,
  DetachInterface: 1024 * KIB,
  CreateNetwork: 1024 * KIB,
  DeleteNetwork: 1024 * KIB,
  SetupPodNetwork: 1024 * KIB,
  TeardownPodNetwork: 1024 * KIB,
  GarbageCollect: 4096 * KIB,
};

/** The service with each method's request decoder refusing, undecoded, what is over its cap. */
export function withMessageCaps(def: grpc.ServiceDefinition): grpc.ServiceDefinition {
  const out: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const [name, m] of Object.entries(def)) {
    const cap = METHOD_CAPS[name] ?? DEFAULT_CAP;
    const decode = m.requestDeserialize;
    out[name] = { ...m, requestDeserialize: (b: Buffer) => (b.length > cap ? ({ [TOO_LARGE]: { bytes: b.length, cap } } satisfies TooLarge) : decode(b)) };
  }
  return out as grpc.ServiceDefinition;
}

export function tooLarge(req: unknown): TooLarge[typeof TOO_LARGE] | undefined {
  return typeof req === 'object' && req !== null ? (req as Partial<TooLarge>)[TOO_LARGE] : undefined;
}
