// The kubelet's pod-resources API: the devices the device plugins gave a pod. The kubelet
// allocates them when it admits the pod, before it asks the runtime for the sandbox, so they
// are known when kni wires the pod. List, not Get: Get needs a feature gate on older kubelets,
// and Multus, which SR-IOV setups know, asks the same way.
import * as grpc from '@grpc/grpc-js';
import { KniError } from '../core/errors';
import { loadProto, unaryOnce } from '../server/protos';

interface PodResourcesMsg {
  name: string;
  namespace: string;
  containers: { name: string; devices: { resource_name: string; device_ids: string[] }[] }[];
}

/** Resource name → device ids, in the order of the pod's containers and of their devices. */
export type PodDeviceMap = Map<string, string[]>;

export function devicesOfPod(pods: PodResourcesMsg[], namespace: string, name: string): PodDeviceMap {
  const out: PodDeviceMap = new Map();
  const pod = pods.find((p) => p.namespace === namespace && p.name === name);
  for (const c of pod?.containers ?? []) {
    for (const d of c.devices ?? []) {
      const ids = out.get(d.resource_name) ?? [];
      for (const id of d.device_ids ?? []) if (!ids.includes(id)) ids.push(id);
      out.set(d.resource_name, ids);
    }
  }
  return out;
}

/** One question to the kubelet: the devices pod namespace/name holds. */
export async function podDevices(socket: string, namespace: string, name: string, timeoutMs = 5_000): Promise<PodDeviceMap> {
  const pkg = loadProto('kubelet/podresources_v1.proto') as any;
  try {
    const res = await unaryOnce<{ pod_resources: PodResourcesMsg[] }>(pkg.v1.PodResourcesLister, socket, 'List', {}, timeoutMs);
    return devicesOfPod(res.pod_resources, namespace, name);
  } catch (e) {
    throw new KniError('UNAVAILABLE', `the kubelet's pod-resources API at ${socket} did not answer (${(e as grpc.ServiceError).details || (e as Error).message}); is networks.podResourcesSocket right, and mounted into kni's container?`);
  }
}
