// containerd's PodNetworkLifecycle (its gRPC network-plugin entry) onto the core: containerd
// creates the netns, calls Setup inside RunPodSandbox before the sandbox starts, Teardown in
// StopPodSandbox, and CheckHealth for the NetworkReady condition.
import * as grpc from '@grpc/grpc-js';
import { NetworkRuntime } from '../../plugin/core/network-runtime';
import { loadProto } from '../../plugin/server/protos';
import { unary } from '../../plugin/server/unary';
import { SandboxRecord } from '../../plugin/store/records';
import { podRoutes } from '../../plugin/core/sandbox-check';

const SERVICE = 'containerd.services.networking.v1.PodNetworkLifecycle';

export function podNetworkLifecycleService(): grpc.ServiceDefinition {
  const pkg = loadProto('containerd/networking_v1.proto') as any;
  return pkg.containerd.services.networking.v1.PodNetworkLifecycle.service;
}

function setupResponse(rt: NetworkRuntime, rec: SandboxRecord, dns: unknown): Record<string, unknown> {
  return {
    interfaces: rec.interfaces.map((i) => ({
      name: i.name,
      mac_address: i.mac,
      type: 'NETDEV',
      mtu: i.mtu,
      state: 'UP',
      addresses: i.addresses.map((a) => `${a.address}/${a.prefixLength}`),
    })),
    routes: podRoutes(rec).map((r) => ({
      destination: r.gateway ? 'default' : r.destination,
      gateway: r.gateway,
      interface_name: r.interface,
      metric: 0,
      scope: r.gateway ? 'global' : 'link',
    })),
    // kni does not manage DNS: what the pod asked for is what it gets.
    dns: dns ?? { servers: [], searches: [], options: [] },
  };
}

export function podNetworkLifecycleHandlers(rt: NetworkRuntime): grpc.UntypedServiceImplementation {
  const u = <Req>(method: string, fn: (req: Req) => Promise<unknown> | unknown) => unary<Req, unknown>(SERVICE, method, fn);
  return {
    SetupPodNetwork: u('SetupPodNetwork', async (req: any) => {
      const rec = await rt.attach({
        sandboxId: req.sandbox_id,
        netnsPath: req.netns_path,
        pod: { name: req.pod_name, namespace: req.pod_namespace, uid: req.pod_uid },
        labels: req.labels,
        annotations: req.annotations,
        portMappings: (req.port_mappings ?? []).map((m: { protocol: string; container_port: number; host_port: number; host_ip: string }) => ({ protocol: m.protocol, containerPort: m.container_port, hostPort: m.host_port, hostIp: m.host_ip })),
        cgroupParent: req.cgroup_parent,
        entryPoint: 'containerd',
      });
      return setupResponse(rt, rec, req.dns_config);
    }),
    TeardownPodNetwork: u('TeardownPodNetwork', async (req: { sandbox_id: string }) => {
      // Teardown comes as containerd stops the sandbox: the netns goes next.
      await rt.detach(req.sandbox_id, true, 'containerd', true);
      return {};
    }),
    CheckHealth: u('CheckHealth', () => {
      const node = rt.node.status();
      if (!node.ready) return { ready: false, message: node.reason };
      // Exhaustion is "no more pods", not NotReady: running pods must not be disturbed.
      const full = rt.ipamStatus().filter((r) => r.exhausted).map((r) => r.cidr);
      return { ready: true, message: full.length ? `ready; pod ranges exhausted: ${full.join(', ')}` : 'ready' };
    }),
  };
}
