// A CNI plugin for the device tests that does with a host link what SR-IOV CNI does with a VF:
// ADD moves the link named by the config's deviceID into the pod's netns as CNI_IFNAME, DEL
// moves it back under its own name. Each call's deviceID, pciBusID and runtimeConfig go, one
// JSON line each, to the config's logFile. Run through a wrapper script in a CNI bin dir.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

const env = process.env;
const conf = JSON.parse(fs.readFileSync(0, 'utf8') || '{}');
const cmd = env.CNI_COMMAND ?? '';
const netns = env.CNI_NETNS ?? '';
const ifName = env.CNI_IFNAME ?? '';
// As host-device: the device in the config (Multus and kni put the kubelet's there), else the deviceID capability.
const device: string | undefined = conf.deviceID ?? conf.runtimeConfig?.deviceID;
const fail = (code: number, msg: string) => {
  process.stdout.write(JSON.stringify({ cniVersion: conf.cniVersion, code, msg }));
  process.exit(1);
};
const ip = (...args: string[]) => execFileSync('ip', args, { encoding: 'utf8' });
const inPod = (...args: string[]) => execFileSync('nsenter', [`--net=${netns}`, 'ip', ...args], { encoding: 'utf8' });

if (conf.logFile) fs.appendFileSync(conf.logFile, JSON.stringify({ cmd, ifName, containerId: env.CNI_CONTAINERID, deviceID: conf.deviceID, pciBusID: conf.pciBusID, runtimeConfig: conf.runtimeConfig ?? {} }) + '\n');

try {
  if (cmd === 'VERSION') {
    process.stdout.write(JSON.stringify({ cniVersion: '1.0.0', supportedVersions: ['0.4.0', '1.0.0', '1.1.0'] }));
  } else if (cmd === 'ADD') {
    if (!device) fail(7, 'no deviceID in the config or runtimeConfig: this network needs a device');
    ip('link', 'set', 'dev', device!, 'netns', netns);
    inPod('link', 'set', 'dev', device!, 'name', ifName);
    inPod('link', 'set', 'dev', ifName, 'up');
    const mac = JSON.parse(inPod('-j', 'link', 'show', 'dev', ifName))[0].address;
    process.stdout.write(JSON.stringify({ cniVersion: conf.cniVersion, interfaces: [{ name: ifName, mac, sandbox: netns }], ips: [] }));
  } else if (cmd === 'DEL') {
    if (device && netns && fs.existsSync(netns)) {
      const here = `/proc/${process.pid}/ns/net`;
      try {
        inPod('link', 'set', 'dev', ifName, 'down');
        inPod('link', 'set', 'dev', ifName, 'name', device);
        inPod('link', 'set', 'dev', device, 'netns', here);
      } catch {
        // Not there (an ADD that failed before the move, a second DEL): nothing to give back.
      }
    }
  }
} catch (e) {
  fail(11, (e as Error).message);
}
