// What a sandbox is, beyond its network: its pod, its kind (container or VM) and the metadata
// a later hook adds to an attached sandbox.
import type { Config, SandboxKind } from './config';
import { invalid } from './errors';
import { log } from './log';
import type { KeyedMutex } from './keyed-mutex';
import type { StateStore } from '../store/state-store';
import { PodRef, SandboxRecord } from '../store/records';
import { AttachRequest, HANDLER_ANNOTATION, KIND_ANNOTATION } from './runtime-types';
import * as validate from './validate';

/** What a metadata update uses of the runtime. */
export interface MetadataParts {
  readonly cfg: Config;
  readonly locks: KeyedMutex;
  readonly sandboxes: ReadonlyMap<string, SandboxRecord>;
  readonly store: StateStore;
}

/**
 * Container or VM: from the runtime handler (CRI, NRI) through cfg.runtimeHandlers, else from
 * the pod annotations (kni.dev/sandbox-kind, or kni.dev/runtime-handler mapped the same way).
 */
export function sandboxKind(cfg: Config, runtimeHandler: string, annotations: Record<string, string>): SandboxKind {
  const byHandler = (h: string | undefined) => (h ? cfg.runtimeHandlers[h] : undefined);
  const explicit = annotations[KIND_ANNOTATION];
  if (explicit !== undefined && explicit !== 'vm' && explicit !== 'container') {
    throw invalid(`annotation ${KIND_ANNOTATION} must be vm or container, not ${JSON.stringify(explicit)}`);
  }
  return byHandler(runtimeHandler) ?? (explicit as SandboxKind | undefined) ?? byHandler(annotations[HANDLER_ANNOTATION]) ?? 'container';
}

export function podRef(pod: Partial<PodRef> = {}): PodRef {
  return {
    name: validate.objectName(pod.name, 'pod name'),
    namespace: validate.objectName(pod.namespace, 'pod namespace'),
    uid: validate.objectName(pod.uid?.toLowerCase(), 'pod uid'),
  };
}

/**
 * Adds what a later hook knows to an attached sandbox (NRI after the CNI path: uid, labels,
 * annotations, runtime handler). Fields already set are kept. Unknown ids answer false.
 */
export async function updateMetadata(rt: MetadataParts, sandboxId: string, meta: Omit<AttachRequest, 'sandboxId' | 'netnsPath' | 'interfaceName'>): Promise<boolean> {
  const id = validate.sandboxId(sandboxId);
  const pod = podRef(meta.pod);
  const labels = validate.stringMap(meta.labels, 'labels');
  const annotations = validate.stringMap(meta.annotations, 'annotations');
  return rt.locks.run(id, () => {
    const rec = rt.sandboxes.get(id);
    if (!rec || rec.phase !== 'attached') return false;
    rec.pod = { name: rec.pod.name || pod.name, namespace: rec.pod.namespace || pod.namespace, uid: rec.pod.uid || pod.uid };
    rec.labels = { ...labels, ...rec.labels };
    rec.annotations = { ...annotations, ...rec.annotations };
    rec.runtimeHandler ||= typeof meta.runtimeHandler === 'string' ? meta.runtimeHandler.slice(0, 253) : '';
    if ((rec.kind ?? 'container') === 'container' && sandboxKind(rt.cfg, rec.runtimeHandler, rec.annotations) === 'vm') {
      log('warn', 'a vm sandbox was wired as a container: the early hook had no runtime handler; annotate the pod with kni.dev/runtime-handler', { sandbox: id, runtimeHandler: rec.runtimeHandler });
    }
    rt.store.sandboxes.put(id, rec);
    return true;
  });
}
