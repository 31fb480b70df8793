// A device plugin for the cluster tests: it registers a resource with a real kubelet
// (deviceplugin v1beta1 over the kubelet's device-plugins directory) and offers fixed device
// ids, as the SR-IOV device plugin offers VFs. It records what the kubelet allocated.
import * as grpc from '@grpc/grpc-js';
import fs from 'node:fs';
import path from 'node:path';
import { devicePluginInfoPath } from '../../plugin/cni/device-info';
import { loadProto } from '../../plugin/server/protos';

export class TestDevicePlugin {
  readonly allocated: string[][] = [];
  private server?: grpc.Server;
  private streams = new Set<grpc.ServerWritableStream<unknown, unknown>>();

  /**
   * dir: the kubelet's device-plugins directory as this process sees it; infoDir: the node's
   * device-info directory, where it leaves a file per device as the SR-IOV device plugin does.
   */
  constructor(private readonly dir: string, readonly resource: string, readonly ids: string[], private readonly infoDir = '', private readonly endpoint = `kni-test-${process.pid}.sock`) {}

  /** The device information it leaves for a device (type "pci", the device's index as its function). */
  infoOf(id: string): Record<string, unknown> {
    return { type: 'pci', version: '1.1.0', pci: { 'pci-address': `0000:65:00.${this.ids.indexOf(id) + 1}` } };
  }

  async start(): Promise<void> {
    for (const id of this.infoDir ? this.ids : []) {
      fs.mkdirSync(path.dirname(devicePluginInfoPath(this.infoDir, this.resource, id)), { recursive: true });
      fs.writeFileSync(devicePluginInfoPath(this.infoDir, this.resource, id), JSON.stringify(this.infoOf(id)));
    }
    const pkg = loadProto('kubelet/deviceplugin_v1beta1.proto') as any;
    const api = pkg.v1beta1;
    const socket = path.join(this.dir, this.endpoint);
    fs.rmSync(socket, { force: true });
    const server = new grpc.Server();
    server.addService(api.DevicePlugin.service, {
      GetDevicePluginOptions: (_c: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, { pre_start_required: false, get_preferred_allocation_available: false }),
      ListAndWatch: (call: grpc.ServerWritableStream<unknown, unknown>) => {
        this.streams.add(call);
        call.on('cancelled', () => this.streams.delete(call));
        call.write({ devices: this.ids.map((ID) => ({ ID, health: 'Healthy' })) });
      },
      Allocate: (call: grpc.ServerUnaryCall<{ container_requests: { devices_ids: string[] }[] }, unknown>, cb: grpc.sendUnaryData<unknown>) => {
        for (const r of call.request.container_requests) this.allocated.push(r.devices_ids);
        cb(null, { container_responses: call.request.container_requests.map((r) => ({ envs: { KNI_TEST_DEVICES: r.devices_ids.join(',') } })) });
      },
      PreStartContainer: (_c: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, {}),
    });
    await new Promise<void>((resolve, reject) => server.bindAsync(`unix://${socket}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
    this.server = server;
    const registration = new api.Registration(`unix://${path.join(this.dir, 'kubelet.sock')}`, grpc.credentials.createInsecure());
    try {
      await new Promise<void>((resolve, reject) =>
        registration.Register({ version: 'v1beta1', endpoint: this.endpoint, resource_name: this.resource, options: {} }, { deadline: Date.now() + 10_000 }, (e: Error | null) => (e ? reject(e) : resolve())),
      );
    } finally {
      registration.close();
    }
  }

  stop(): void {
    for (const s of this.streams) s.end();
    this.server?.forceShutdown();
    fs.rmSync(path.join(this.dir, this.endpoint), { force: true });
    for (const id of this.infoDir ? this.ids : []) fs.rmSync(devicePluginInfoPath(this.infoDir, this.resource, id), { force: true });
  }
}
