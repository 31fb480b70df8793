// The ways the bench attaches and detaches a pod, each timed the same way: kni's own API,
// the KNI POC API (kni makes the netns), kni-cni exec'd as a runtime execs it, and the CNI
// reference plugins.
import path from 'node:path';
import type { Client } from '../plugin/client/clients';
import { packageRoot } from '../plugin/server/protos';
import { GRPC_PATH, POC_PATH, REFERENCE_SUFFIX } from './bench-report';
import { CNI_BIN, execPlugin } from './cni-exec';

const SHIM = path.join(packageRoot(), 'dist/bin/kni-cni');

/** What the paths exec: missing ones mean the setup step has not run. */
export const BENCH_BINARIES = [SHIM, `${CNI_BIN}/bridge`, `${CNI_BIN}/host-local`, `${CNI_BIN}/loopback`];

/** One way of attaching and detaching a pod, given a netns the bench made as a runtime does. */
export interface Path {
  name: string;
  add(id: string, netns: string): Promise<void>;
  del(id: string, netns: string): Promise<void>;
  /** Untimed, after every del: what comes later, off the pod's critical path. */
  after?(id: string): Promise<void>;
}

export function benchPaths(o: { rt: Client; kni: Client; cniSocket: string; dir: string }): Path[] {
  // CNI_ARGS as containerd's and CRI-O's CRI pass them, the pod sandbox named (from run 41; runs
  // 1–40 passed none, so kni-cni's DEL was the plain one that deletes the veth before answering).
  const cniEnv = (cmd: string, id: string, netns: string) => ({
    CNI_COMMAND: cmd, CNI_CONTAINERID: id, CNI_NETNS: netns, CNI_IFNAME: 'eth0',
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=${id};K8S_POD_INFRA_CONTAINER_ID=${id};K8S_POD_UID=uid-${id}`,
  });
  const kniConf = JSON.stringify({ cniVersion: '1.0.0', name: 'kni', type: 'kni-cni', socket: o.cniSocket });
  const loConf = JSON.stringify({ cniVersion: '1.0.0', name: 'lo', type: 'loopback' });
  // bridge + host-local whatever kni's podLink, as in every earlier run: ptp, the routed
  // reference, waits for IPv6 DAD on every ADD (≈ 1 s each here), which kni skips.
  const ref = { type: 'bridge', bridge: 'cni0', isGateway: true, hairpinMode: true };
  const refConf = JSON.stringify({
    cniVersion: '1.0.0', name: 'ref', ...ref, ipMasq: true, mtu: 1500,
    ipam: { type: 'host-local', ranges: [[{ subnet: '10.129.0.0/16' }], [{ subnet: 'fd00:129::/64' }]], routes: [{ dst: '0.0.0.0/0' }, { dst: '::/0' }], dataDir: path.join(o.dir, 'host-local') },
  });
  return [
    {
      name: GRPC_PATH,
      add: async (id, netns) => void (await o.rt.Attach({ sandbox_id: id, netns_path: netns })),
      // As a runtime stopping the sandbox: the bench removes the netns right after.
      del: async (id) => void (await o.rt.Detach({ sandbox_id: id, netns_ending: true })),
    },
    {
      // The kubelet fork's flow: RunPodSandbox is CreateNetwork + AttachInterface, StopPodSandbox
      // DetachInterface (the DEL timed), RemovePodSandbox, later, DeleteNetwork. The bench's own
      // netns goes unused.
      name: POC_PATH,
      add: async (id) => {
        const { netns_path } = await o.kni.CreateNetwork({ name: id, namespace: 'bench' });
        await o.kni.AttachInterface({ id, name: id, namespace: 'bench', extradata: { netns: netns_path } });
      },
      del: async (id) => void (await o.kni.DetachInterface({ id })),
      after: async (id) => void (await o.kni.DeleteNetwork({ id })),
    },
    {
      name: 'kni-cni (exec)',
      add: (id, netns) => execPlugin(SHIM, cniEnv('ADD', id, netns), kniConf),
      del: (id, netns) => execPlugin(SHIM, cniEnv('DEL', id, netns), kniConf),
    },
    {
      name: `${ref.type}${REFERENCE_SUFFIX}`,
      add: async (id, netns) => {
        await execPlugin(`${CNI_BIN}/loopback`, cniEnv('ADD', id, netns), loConf);
        await execPlugin(`${CNI_BIN}/${ref.type}`, cniEnv('ADD', id, netns), refConf);
      },
      del: async (id, netns) => {
        await execPlugin(`${CNI_BIN}/${ref.type}`, cniEnv('DEL', id, netns), refConf);
        await execPlugin(`${CNI_BIN}/loopback`, cniEnv('DEL', id, netns), loConf);
      },
    },
  ];
}
