// protobufjs writes each message type's codecs (encode, decode, fromObject, toObject) the first
// time that type is used, and compiles them: in a fresh daemon the first Attach paid that for
// its request, its answer and every type inside them (≈ 30 % of the daemon's CPU in that call,
// docs/performance-rounds.md, eighth round). Once the daemon serves, each method's codecs are made
// ahead, one method per event-loop turn, by a round trip of a sample message that holds one of
// every nested message type, so that the first pods do not wait for them.
import type * as grpc from '@grpc/grpc-js';
import type { PackageDefinition } from '@grpc/proto-loader';

/** The parts of a DescriptorProto (as proto-loader gives it) that a sample needs. */
interface FieldDescriptor { name: string; type: string; typeName: string; label: string }
interface MessageDescriptor { name: string; field: FieldDescriptor[]; nestedType?: MessageDescriptor[]; options?: { mapEntry?: boolean } | null }

/** Every message type of the loaded protos, by full name (`kni.runtime.v1.PodNetwork`). */
const messageTypes = new Map<string, MessageDescriptor>();

/**
 * Records the message types of a package definition (protos.ts calls it for each proto it
 * loads), with the types nested in them: proto-loader lists only the outer ones, and a map
 * field's entry type is nested in its message.
 */
export function indexMessageTypes(def: PackageDefinition): void {
  const add = (name: string, t: MessageDescriptor): void => {
    messageTypes.set(name, t);
    for (const n of t.nestedType ?? []) add(`${name}.${n.name}`, n);
  };
  for (const [name, t] of Object.entries(def)) {
    if ('format' in t && t.format === 'Protocol Buffer 3 DescriptorProto') add(name, t.type as MessageDescriptor);
  }
}

/** A type name as a field names it, resolved from the scope outwards (protobuf's own rule). */
function resolve(typeName: string, scope: string): string | undefined {
  if (typeName.startsWith('.')) return messageTypes.has(typeName.slice(1)) ? typeName.slice(1) : undefined;
  for (let s = scope; ; s = s.slice(0, Math.max(0, s.lastIndexOf('.')))) {
    const full = s ? `${s}.${typeName}` : typeName;
    if (messageTypes.has(full)) return full;
    if (!s) return undefined;
  }
}

/**
 * A message of the named type with one of every nested message in it (a map of messages gets
 * one entry); scalars are left out, their code is in the outer type's codecs already. `seen`
 * collects the types reached; a type already on the path is not entered again.
 */
export function sampleMessage(fullName: string, seen: Set<string>, path: string[] = []): Record<string, unknown> {
  const desc = messageTypes.get(fullName);
  const out: Record<string, unknown> = {};
  if (!desc || path.includes(fullName)) return out;
  seen.add(fullName);
  for (const f of desc.field) {
    if (f.type !== 'TYPE_MESSAGE') continue;
    const inner = resolve(f.typeName, fullName);
    const innerDesc = inner ? messageTypes.get(inner) : undefined;
    if (!inner || !innerDesc) continue;
    if (innerDesc.options?.mapEntry) {
      const value = innerDesc.field.find((x) => x.name === 'value');
      const valueType = value?.type === 'TYPE_MESSAGE' ? resolve(value.typeName, inner) : undefined;
      if (valueType) out[f.name] = { '1': sampleMessage(valueType, seen, [...path, fullName]) };
      continue;
    }
    const one = sampleMessage(inner, seen, [...path, fullName]);
    out[f.name] = f.label === 'LABEL_REPEATED' ? [one] : one;
  }
  return out;
}

/** The full name of a method's request or response type: its service's package, outwards. */
function typeOf(method: grpc.MethodDefinition<unknown, unknown>, which: 'requestType' | 'responseType'): string | undefined {
  const t = (method as unknown as Record<string, { type?: MessageDescriptor } | undefined>)[which]?.type;
  if (!t) return undefined;
  const service = method.path.split('/')[1] ?? '';
  return resolve(t.name, service.slice(0, Math.max(0, service.lastIndexOf('.'))));
}

/** One method's codecs, both ways, for its request and its answer. The types reached go in `seen`. */
export function warmMethod(method: grpc.MethodDefinition<unknown, unknown>, seen: Set<string>): void {
  const req = typeOf(method, 'requestType');
  const res = typeOf(method, 'responseType');
  if (req) method.requestDeserialize(method.requestSerialize(sampleMessage(req, seen)));
  if (res) method.responseDeserialize(method.responseSerialize(sampleMessage(res, seen)));
}

/**
 * Every method's codecs of these services, one method per event-loop turn: a call that comes
 * meanwhile waits for one method's codecs at most. Resolves with the message types reached and
 * the methods that failed (a sample the codecs refused: that method's types stay lazy, no harm).
 */
export async function warmCodecs(services: grpc.ServiceDefinition[]): Promise<{ types: Set<string>; failed: string[] }> {
  const seen = new Set<string>();
  const failed: string[] = [];
  for (const s of services) {
    for (const m of Object.values(s)) {
      await new Promise((r) => setImmediate(r));
      try {
        warmMethod(m, seen);
      } catch (e) {
        failed.push(`${m.path}: ${(e as Error).message}`);
      }
    }
  }
  return { types: seen, failed };
}
