// The pods' MTU with `mtu: auto` (the default): the MTU of the link holding the node's default
// route, less vxlan's encapsulation with backend vxlan; a number in the config wins
// (plugin/node/node-mtu.ts). Each case a daemon whose node netns has a 1460-byte uplink.
import assert from 'node:assert/strict';
import { inNetns, sh } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';

const uplink = (ns: string) => {
  sh('ip', ['-n', ns, 'link', 'add', 'up0', 'mtu', '1460', 'type', 'veth', 'peer', 'name', 'up0p', 'mtu', '1460']);
  for (const l of ['up0', 'up0p']) sh('ip', ['-n', ns, 'link', 'set', l, 'up']);
  sh('ip', ['-n', ns, 'addr', 'add', '192.0.2.5/24', 'dev', 'up0']);
  sh('ip', ['-n', ns, 'route', 'add', 'default', 'via', '192.0.2.1', 'dev', 'up0']);
};

describe('the pods\' MTU (real kernel)', () => {
  for (const c of [
    { name: 'auto: the default route link\'s (1460)', config: {}, want: 1460, log: /pods get MTU 1460, from up0, the link of the node's IPv4 default route$/ },
    { name: 'auto with backend vxlan: less the encapsulation (1410)', config: { backend: 'vxlan' }, want: 1410, log: /pods get MTU 1410, from up0, .*less vxlan's 50 bytes$/ },
    { name: 'a number in the config wins (1400)', config: { mtu: 1400 }, want: 1400, log: /pods get MTU 1400, from the config$/ },
  ]) {
    it(c.name, async () => {
      const d = await TestDaemon.start({ ranges: ['10.83.0.0/24', 'fd00:83::/64'], ...c.config }, { beforeLaunch: uplink });
      try {
        const node = await d.rt().GetNode();
        assert.equal(node.networks[0].mtu, c.want);
        const netns = d.makePodNetns('mtu-pod');
        const pod = await d.rt().Attach({ sandbox_id: 'mtu-pod', netns_path: netns });
        assert.equal(pod.interfaces[0].mtu, c.want);
        assert.match(inNetns(netns, 'ip', ['link', 'show', 'eth0']).out, new RegExp(`mtu ${c.want} `));
        assert.match(inNetns(d.nodeNetns, 'ip', ['link', 'show', pod.interfaces[0].host_interface]).out, new RegExp(`mtu ${c.want} `));
        assert.ok(d.output.split('\n').some((l) => l.startsWith('{') && c.log.test(JSON.parse(l).msg)), d.output.slice(-1500));
        await d.rt().Detach({ sandbox_id: 'mtu-pod', netns_ending: true });
      } finally {
        d.cleanup();
      }
    });
  }
});
