// The KNI POC API (package kni, service KNI) over the core. Both POC client flows work:
// - kubelet fork: CreateNetwork → AttachInterface(extradata["netns"]) → QueryPodNetwork →
//   DetachInterface → DeleteNetwork;
// - containerd fork: CreateNetwork{} → AttachInterface(isolation.path) → DeleteNetwork alone.
import * as grpc from '@grpc/grpc-js';
import { invalid } from '../core/errors';
import { NetworkRuntime } from '../core/network-runtime';
import { SandboxRecord } from '../store/records';
import { unary } from './unary';
import { createNetwork, deleteNetwork } from '../core/owned-netns';

type Map = Record<string, string>;

function ipconfigs(rec: SandboxRecord): Record<string, { ip: string[]; mac: string; extradata: Map }> {
  const out: Record<string, { ip: string[]; mac: string; extradata: Map }> = {};
  for (const itf of rec.interfaces) out[itf.name] = { ip: itf.addresses.map((a) => a.address), mac: itf.mac, extradata: {} };
  return out;
}

export function kniPocHandlers(rt: NetworkRuntime): grpc.UntypedServiceImplementation {
  const u = <Req>(method: string, fn: (req: Req) => Promise<unknown> | unknown) => unary<Req, unknown>('kni.KNI', method, fn);
  return {
    CreateNetwork: u('CreateNetwork', async (req: { name: string; uid: string; namespace: string; netns_path_prefix: string }) => {
      const prefix = req.netns_path_prefix.replace(/\/+$/, '');
      if (prefix && prefix !== rt.cfg.netnsDir) {
        throw invalid(`netns_path_prefix ${JSON.stringify(req.netns_path_prefix)} is not kni's netns dir ${rt.cfg.netnsDir}`);
      }
      const n = await createNetwork(rt, { name: req.name, namespace: req.namespace, uid: req.uid });
      return { netns_path: n.path, extradata: {} };
    }),

    AttachInterface: u('AttachInterface', async (req: { name: string; id: string; namespace: string; isolation: { path: string } | null; labels: Map; annotations: Map; extradata: Map; port_mappings?: { protocol: string | number; container_port: number; host_port: number; host_ip: string }[] }) => {
      const netnsPath = req.isolation?.path || req.extradata?.netns || '';
      if (!netnsPath) throw invalid('no network namespace given: set isolation.path or extradata["netns"]');
      const rec = await rt.attach({
        sandboxId: req.id,
        netnsPath,
        pod: { name: req.name, namespace: req.namespace },
        labels: req.labels,
        annotations: req.annotations,
        // The KNI POC Protocol enum: TCP = 0, UDP = 1, SCTP = 2 (names when the loader gives names).
        portMappings: (req.port_mappings ?? []).map((m) => ({ protocol: typeof m.protocol === 'number' ? (['tcp', 'udp', 'sctp'][m.protocol] ?? String(m.protocol)) : m.protocol, containerPort: m.container_port, hostPort: m.host_port, hostIp: m.host_ip })),
      });
      return { ipconfigs: ipconfigs(rec), extradata: { netns: rec.netnsPath } };
    }),

    DetachInterface: u('DetachInterface', async (req: { id: string }) => {
      await rt.detach(req.id, false);
      return {};
    }),

    DeleteNetwork: u('DeleteNetwork', async (req: { id: string; netns_path: string }) => {
      await deleteNetwork(rt, req.id, req.netns_path);
      return {};
    }),

    QueryPodNetwork: u('QueryPodNetwork', (req: { id: string }) => {
      const rec = rt.get(req.id);
      return { ipconfigs: ipconfigs(rec), extradata: { netns: rec.netnsPath } };
    }),

    SetupNodeNetwork: u('SetupNodeNetwork', async () => {
      await rt.node.setup();
      return {};
    }),

    QueryNodeNetworks: u('QueryNodeNetworks', () => {
      const s = rt.node.status();
      const extradata: Map = { bridge: s.bridge, podLink: s.podLink, ranges: s.ranges.join(','), mtu: String(s.mtu) };
      if (s.reason) extradata.reason = s.reason;
      return { networks: [{ name: s.name, ready: s.ready, extradata }], extradata: {} };
    }),
  };
}
