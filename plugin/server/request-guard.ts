// What a request's bytes must pass before a handler sees them: a per-method size cap, checked
// on the raw bytes before protobufjs decodes them, and decoding itself (grpc-js answers a
// request that does not decode with INTERNAL; it is the caller's error: INVALID_ARGUMENT).
//
// Size caps:
// grpc-js has one receive limit per server (4 MiB); decoding a legal 4 MiB request made of
// hundreds of thousands of map entries stalls the event loop for seconds, for every caller.
// Requests that carry pod labels and annotations (Kubernetes caps all annotations of an
// object at 256 KiB, labels likewise by practice) get 1 MiB; the live list of GarbageCollect
// (up to ~30 000 ids of 128 characters) keeps the server's 4 MiB; everything else is small.
import * as grpc from '@grpc/grpc-js';

const REFUSED = Symbol('request refused before decoding');
interface Refused {
  [REFUSED]: { code: 'RESOURCE_EXHAUSTED' | 'INVALID_ARGUMENT'; message: string };
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

/**
 * The service with each method's request decoder guarded: what is over its cap is not decoded,
 * what does not decode is not an internal error. The handler gets a marker (see refusal()).
 */
export function guardRequests(def: grpc.ServiceDefinition): grpc.ServiceDefinition {
  const out: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const [name, m] of Object.entries(def)) {
    const cap = METHOD_CAPS[name] ?? DEFAULT_CAP;
    const decode = m.requestDeserialize;
    const refuse = (code: Refused[typeof REFUSED]['code'], message: string): Refused => ({ [REFUSED]: { code, message } });
    out[name] = {
      ...m,
      requestDeserialize: (b: Buffer) => {
        if (b.length > cap) return refuse('RESOURCE_EXHAUSTED', `${name} request of ${b.length} bytes is larger than ${cap} bytes, the limit for this method`);
        try {
          return decode(b);
        } catch (e) {
          return refuse('INVALID_ARGUMENT', `${name} request does not decode: ${String((e as Error)?.message ?? e).slice(0, 200)}`);
        }
      },
    };
  }
  return out as grpc.ServiceDefinition;
}

/** Why a guarded request was refused before decoding, if it was. */
export function refusal(req: unknown): Refused[typeof REFUSED] | undefined {
  return typeof req === 'object' && req !== null ? (req as Partial<Refused>)[REFUSED] : undefined;
}
