// The Events kni records on Kubernetes objects (kubectl describe shows them). The same Event
// again — same object, type, reason and message — raises the count and lastTimestamp of the one
// already recorded, as client-go's recorder does (kubectl describe: "x3 over 10m"), rather than
// adding another object each time: a pod re-wired three times shows one line, counted.
import { log } from '../core/log';
import { apiError, isNotFound, KubeApi, withTimeout } from './kube-api';

export interface EventTarget {
  kind: 'Node' | 'ConfigMap' | 'Pod' | 'NetworkAttachmentDefinition' | 'NetworkPolicy' | 'ClusterNetworkPolicy' | 'MultiNetworkPolicy';
  apiVersion?: string;
  name: string;
  namespace?: string;
  uid?: string;
}

/** Events remembered to count on, the least recently recorded forgotten first (client-go keeps 4096). */
const REMEMBERED = 4096;
/** An Event recorded longer ago than this is not counted on: the API server drops Events an hour after their last change (--event-ttl). */
const COUNT_WITHIN_MS = 50 * 60_000;

interface Recorded {
  name: string;
  count: number;
  at: number;
}

const recorded = new Map<string, Recorded>();
/** Per Event: the write in flight, so that two at once do not both create one. */
const writing = new Map<string, Promise<void>>();
/** The API server refused kni a patch of Events (a manifest before kni counted them): each is created. */
let patchRefused = false;

/**
 * Records a core/v1 Event on an object (a Node's events live in "default", as the kubelet's
 * do), or counts it again on the one recorded. Never throws: an Event that cannot be written is
 * logged instead.
 */
export function recordEvent(api: KubeApi, target: EventTarget, type: 'Normal' | 'Warning', reason: string, message: string, timeoutMs = 10_000): Promise<void> {
  const text = message.slice(0, 1024);
  const key = JSON.stringify([target.namespace ?? 'default', target.kind, target.name, target.uid ?? '', type, reason, text]);
  const next = (writing.get(key) ?? Promise.resolve()).then(() => writeEvent(api, key, target, type, reason, text, timeoutMs));
  writing.set(key, next);
  void next.finally(() => {
    if (writing.get(key) === next) writing.delete(key);
  });
  return next;
}

async function writeEvent(api: KubeApi, key: string, target: EventTarget, type: 'Normal' | 'Warning', reason: string, message: string, timeoutMs: number): Promise<void> {
  const namespace = target.namespace ?? 'default';
  const now = new Date();
  const seen = recorded.get(key);
  if (seen && !patchRefused && Date.now() - seen.at < COUNT_WITHIN_MS) {
    try {
      const body = { count: seen.count + 1, lastTimestamp: now.toISOString() };
      await withTimeout(api.core.patchNamespacedEvent({ name: seen.name, namespace, body }, api.k8s.setHeaderOptions('Content-Type', api.k8s.PatchStrategy.MergePatch)), timeoutMs, 'patch Event');
      remember(key, { name: seen.name, count: seen.count + 1, at: Date.now() });
      return;
    } catch (e) {
      // Gone (its hour is up, or someone deleted it): recorded anew below.
      if ((e as { code?: number }).code === 403) patchRefused = true;
      else if (!isNotFound(e)) return void log('warn', 'cannot record an Event', { reason, message, error: apiError(e) });
    }
  }
  try {
    const made = await withTimeout(api.core.createNamespacedEvent({
      namespace,
      body: {
        metadata: { generateName: `${target.name}.kni-`, namespace },
        involvedObject: { kind: target.kind, apiVersion: target.apiVersion ?? 'v1', name: target.name, namespace: target.namespace, uid: target.uid },
        type,
        reason,
        message,
        source: { component: 'kni' },
        reportingComponent: 'kni',
        reportingInstance: process.env.KNI_NODE_NAME ?? '',
        firstTimestamp: now,
        lastTimestamp: now,
        count: 1,
      },
    }), timeoutMs, 'create Event');
    if (made.metadata?.name) remember(key, { name: made.metadata.name, count: 1, at: Date.now() });
  } catch (e) {
    log('warn', 'cannot record an Event', { reason, message, error: apiError(e) });
  }
}

function remember(key: string, r: Recorded): void {
  recorded.delete(key);
  recorded.set(key, r);
  if (recorded.size > REMEMBERED) recorded.delete(recorded.keys().next().value!);
}
