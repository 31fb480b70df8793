// Devices for networks that take one (k8s.v1.cni.cncf.io/resourceName): which device each
// attachment gets from those the kubelet gave the pod, and the errors when there is none. The
// kubelet's wire and the plugins' side are proven in cni-backend.test.ts and the networks
// cluster test (a real kubelet and device plugin).
import assert from 'node:assert/strict';
import { blankInterface, PlannedInterface } from '../plugin/core/attach-pipeline';
import { assignDevices } from '../plugin/core/device-assignment';
import { KniError } from '../plugin/core/errors';
import type { NetworkRuntime } from '../plugin/core/network-runtime';
import fs from 'node:fs';
import { cniDeviceInfoPath, copyFromDevicePlugin, devicePluginInfoPath, readDeviceInfo } from '../plugin/cni/device-info';
import { devicesOfPod } from '../plugin/kube/pod-resources';
import { RUN } from './helpers/sh';
import { resourceNameProblem } from '../plugin/networks/network-definitions';
import type { SandboxRecord } from '../plugin/store/records';

const RES = 'example.com/sriov_a';
const planned = (network: string, resourceName?: string): PlannedInterface =>
  ({ backend: {} as PlannedInterface['backend'], itf: blankInterface('net', { network }), req: { ips: [], ports: [] }, ...(resourceName ? { resourceName } : {}) });
const sandbox = (interfaces: SandboxRecord['interfaces'] = [], name = 'p'): SandboxRecord =>
  ({ id: 's1', pod: { namespace: 'ns', name, uid: 'u' }, interfaces } as unknown as SandboxRecord);

describe('devices for networks that take one', () => {
  let asked = 0;
  const rt = (given: Record<string, string[]>) =>
    ({ podDevices: async () => (asked++, new Map(Object.entries(given))) } as unknown as NetworkRuntime);

  it('the kubelet\'s answer: the pod\'s devices by resource, its containers in order, other pods left out', () => {
    const pods = [
      { name: 'p', namespace: 'other', containers: [{ name: 'c', devices: [{ resource_name: RES, device_ids: ['x'] }] }] },
      { name: 'p', namespace: 'ns', containers: [
        { name: 'a', devices: [{ resource_name: RES, device_ids: ['0000:03:02.3'] }, { resource_name: 'example.com/gpu', device_ids: ['g0'] }] },
        { name: 'b', devices: [{ resource_name: RES, device_ids: ['0000:03:02.0'] }] },
      ] },
    ];
    assert.deepEqual([...devicesOfPod(pods, 'ns', 'p')], [[RES, ['0000:03:02.3', '0000:03:02.0']], ['example.com/gpu', ['g0']]]);
    assert.deepEqual([...devicesOfPod(pods, 'ns', 'q')], []);
  });

  it('each attachment gets its own device, in the order the pod asks; the kubelet is asked only when a network names a resource', async () => {
    asked = 0;
    const none = [planned('ns/plain')];
    await assignDevices(rt({}), sandbox(), none);
    assert.equal(asked, 0);
    assert.equal(none[0].req.device, undefined);
    const plan = [planned('ns/plain'), planned('ns/vf-a', RES), planned('ns/vf-b', RES)];
    await assignDevices(rt({ [RES]: ['d0', 'd1'] }), sandbox(), plan);
    assert.equal(asked, 1);
    assert.deepEqual(plan.map((p) => [p.req.device?.id, p.itf.deviceId]), [[undefined, undefined], ['d0', 'd0'], ['d1', 'd1']]);
  });

  it('a network added to a running pod takes a device its other interfaces do not hold', async () => {
    const p = planned('ns/vf-a', RES);
    await assignDevices(rt({ [RES]: ['d0', 'd1'] }), sandbox([{ ...blankInterface('net1'), deviceId: 'd0' }]), [p]);
    assert.deepEqual(p.req.device, { id: 'd1', resource: RES });
  });

  it('no device left, none given, or no pod to ask about: FAILED_PRECONDITION saying what to request', async () => {
    const fails = async (given: Record<string, string[]>, plan: PlannedInterface[], re: RegExp, rec = sandbox()) =>
      assert.rejects(assignDevices(rt(given), rec, plan), (e: Error) => e instanceof KniError && e.code === 'FAILED_PRECONDITION' && re.test(e.message));
    await fails({}, [planned('ns/vf-a', RES)], /network ns\/vf-a takes one device of example\.com\/sriov_a per attachment \(its k8s\.v1\.cni\.cncf\.io\/resourceName annotation\), and the kubelet gave pod ns\/p none: request example\.com\/sriov_a/);
    await fails({ [RES]: ['d0'] }, [planned('ns/vf-a', RES), planned('ns/vf-b', RES)], /network ns\/vf-b .*pod ns\/p was given 1 \(d0\) and its other networks use them all/);
    await fails({ [RES]: ['d0'] }, [planned('ns/vf-a', RES)], /sandbox s1 names no pod to ask the kubelet about/, sandbox([], ''));
  });

  it('device information files: named as Multus and device plugins name them; copied for the attachment; read only when it is a JSON object with a type', () => {
    const dir = `/tmp/${RUN}-devinfo`;
    try {
      assert.equal(devicePluginInfoPath(dir, 'intel.com/sriov_a', '0000:03:02.3'), `${dir}/dp/intel.com-sriov_a-0000:03:02.3-device.json`);
      const mine = cniDeviceInfoPath(dir, 'team/vf-net', 'abc123', 'net1');
      assert.equal(mine, `${dir}/cni/team-vf-net-abc123_net1`);
      assert.equal(copyFromDevicePlugin(dir, 'intel.com/sriov_a', '0000:03:02.3', mine), false, 'no device plugin file: nothing copied');
      fs.mkdirSync(`${dir}/dp`, { recursive: true });
      const info = { type: 'pci', version: '1.1.0', pci: { 'pci-address': '0000:03:02.3' } };
      fs.writeFileSync(devicePluginInfoPath(dir, 'intel.com/sriov_a', '0000:03:02.3'), JSON.stringify(info));
      assert.equal(copyFromDevicePlugin(dir, 'intel.com/sriov_a', '0000:03:02.3', mine), true);
      assert.deepEqual(readDeviceInfo(mine), info);
      for (const bad of ['[1]', '{"pci": {}}', '{', 'x'.repeat(70_000)]) {
        fs.writeFileSync(`${dir}/bad`, bad);
        assert.equal(readDeviceInfo(`${dir}/bad`), undefined, bad.slice(0, 20));
      }
      assert.equal(readDeviceInfo(`${dir}/missing`), undefined);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a resourceName annotation must be a device plugin resource name', () => {
    for (const ok of [RES, 'intel.com/intel_sriov_netdevice', 'nvidia.com/gpu', 'kni.dev/test-nic']) assert.equal(resourceNameProblem(ok), '', ok);
    for (const bad of ['sriov', 'Example.com/x', 'example.com/', 'example.com/-x', 'a/b/c', 7, `example.com/${'x'.repeat(64)}`]) assert.match(resourceNameProblem(bad), /is not a device plugin resource name/, String(bad));
  });
});
