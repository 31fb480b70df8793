// Devices for the networks that take one. A definition annotated with
// k8s.v1.cni.cncf.io/resourceName (an SR-IOV network names its pool of VFs so) gives each
// attachment one device of that resource, picked from those the kubelet's device manager gave
// the pod, in the order the pod asks for its networks: Multus's order, so a pod moved from
// Multus gets the same device on the same interface. The plugins get it as deviceID. The
// kubelet is asked only when a planned network names a resource: no other attach pays for it.
import { KniError } from './errors';
import { definitionOf } from './network-backend';
import type { PlannedInterface } from './attach-pipeline';
import { RESOURCE_NAME_ANNOTATION } from '../networks/network-definitions';
import { SandboxRecord } from '../store/records';

/** What device assignment uses of the runtime. */
export interface DeviceParts {
  podDevices(namespace: string, name: string): Promise<Map<string, string[]>>;
}

export async function assignDevices(rt: DeviceParts, rec: SandboxRecord, plan: PlannedInterface[]): Promise<void> {
  // A device the pod names (a selection's deviceID) is one attachment's alone.
  const held = new Map(rec.interfaces.filter((i) => i.deviceId).map((i) => [i.deviceId!, i.name]));
  for (const p of plan.filter((q) => q.req.device && !q.resourceName)) {
    const other = held.get(p.req.device!.id);
    if (other) throw new KniError('INVALID_ARGUMENT', `network ${definitionOf(p.itf)} (${p.itf.name}) asks for device ${p.req.device!.id}, which ${other} of sandbox ${rec.id} already has`);
    held.set(p.req.device!.id, p.itf.name);
  }
  const wanting = plan.filter((p) => p.resourceName);
  if (!wanting.length) return;
  const first = wanting[0];
  const pod = `${rec.pod.namespace}/${rec.pod.name}`;
  if (!rec.pod.name) throw new KniError('FAILED_PRECONDITION', `network ${definitionOf(first.itf)} takes a device of ${first.resourceName}, but sandbox ${rec.id} names no pod to ask the kubelet about`);
  const given = await rt.podDevices(rec.pod.namespace, rec.pod.name);
  // Devices already on the sandbox's other interfaces (a network added to a running pod) or named by the pod.
  const taken = new Set(held.keys());
  for (const p of wanting) {
    const resource = p.resourceName!;
    const ids = given.get(resource) ?? [];
    const free = ids.find((id) => !taken.has(id));
    if (!free) {
      const network = `network ${definitionOf(p.itf)} takes one device of ${resource} per attachment (its ${RESOURCE_NAME_ANNOTATION} annotation)`;
      throw new KniError(
        'FAILED_PRECONDITION',
        ids.length
          ? `${network}; pod ${pod} was given ${ids.length} (${ids.join(', ')}) and its other networks use them all: request one more ${resource} in a container's resources`
          : `${network}, and the kubelet gave pod ${pod} none: request ${resource} in one of its containers' resources (limits)`,
      );
    }
    taken.add(free);
    p.req.device = { id: free, resource };
    p.itf.deviceId = free;
  }
}
