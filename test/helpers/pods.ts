// Pods as the kubelet-fork flow makes them in the pod-network tests: kni pins the netns
// (CreateNetwork), then the runtime API attaches it.
import type { Client } from '../../plugin/client/clients';

export interface TestPod {
  netns: string;
  net: any;
}

export const addressesOf = (p: any): string[] => p.interfaces.flatMap((i: any) => i.addresses.map((a: any) => a.address));

export async function newPod(kni: Client, rt: Client, id: string): Promise<TestPod> {
  const { netns_path } = await kni.CreateNetwork({ name: id, namespace: 'default' });
  const net = await rt.Attach({ sandbox_id: id, netns_path, pod: { name: id, namespace: 'default', uid: 'UID-1' } });
  return { netns: netns_path, net };
}
