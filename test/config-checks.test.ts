// Pure logic: the config file and RPC argument checks (every problem named, nothing half-applied).
import assert from 'node:assert/strict';
import { ConfigError, defaultConfig, parseConfig, parseConfigText } from '../plugin/core/config';
import { KniError } from '../plugin/core/errors';
import * as validate from '../plugin/core/validate';
import { parseCidr } from '../plugin/ipam/ip';
import { txChecksumWanted } from '../plugin/node/vxlan-device';

describe('config', () => {
  it('has the embedded default', () => {
    const c = parseConfig(undefined);
    assert.equal(c.bridge, 'kni0');
    assert.equal(c.mtu, 0, 'mtu auto: found at node setup');
    assert.deepEqual(c.ranges.map((r) => r.text), ['10.244.0.0/24', 'fd00:10:244::/64']);
    assert.equal(c.netnsDir, '/run/netns');
    assert.equal(c.netnsPoolSize, 4);
  });
  const cases: [string, unknown, RegExp][] = [
    ['bad CIDR', { ranges: ['10.0.0.0/33'] }, /prefix length 33/],
    ['garbage CIDR', { ranges: ['ten'] }, /not a CIDR/],
    ['two IPv4 ranges', { ranges: ['10.0.0.0/24', '10.1.0.0/24'] }, /at most one per family/],
    ['too small', { ranges: ['10.0.0.0/31'] }, /too small/],
    ['no ranges', { ranges: [] }, /one or two CIDRs/],
    ['MTU', { mtu: 70000 }, /mtu 70000 is not "auto" or an integer from 576 to 65535/],
    ['MTU as text', { mtu: '1500' }, /mtu "1500" is not "auto"/],
    ['IPv6 MTU', { mtu: 1000 }, /1280/],
    ['bridge name', { bridge: 'this-name-is-too-long' }, /at most 15/],
    ['pod link', { podLink: 'ptp' }, /podLink "ptp" is not "auto", "bridge" or "routed"/],
    ['unknown key', { brige: 'x' }, /unknown setting "brige"/],
    ['relative netnsDir', { netnsDir: 'netns' }, /absolute/],
    ['netns pool size', { netnsPoolSize: 65 }, /netnsPoolSize must be a whole number from 0 to 64/],
    ['netns pool size, not a number', { netnsPoolSize: '4' }, /netnsPoolSize must be a whole number from 0 to 64/],
    ['backend', { backend: 'ipip' }, /backend must be auto, host-gw, vxlan or none/],
    ['vxlan vni', { vxlan: { vni: 0 } }, /vxlan\.vni/],
    ['vxlan key', { vxlan: { id: 3 } }, /unknown setting "vxlan\.id"/],
    ['vxlan checksum offload', { vxlan: { txChecksumOffload: 'off' } }, /vxlan\.txChecksumOffload must be true, false or "auto", not "off"/],
    ['peerProbe port', { peerProbe: { port: 70000 } }, /peerProbe\.port must be a port number, or 0 for no probe/],
    ['peerProbe key', { peerProbe: { every: 3 } }, /unknown setting "peerProbe\.every"/],
    ['peerProbe interval', { peerProbe: { intervalSeconds: 0 } }, /peerProbe\.intervalSeconds must be a number from 1 to 3600/],
    ['peerProbe timeout', { peerProbe: { intervalSeconds: 2, timeoutSeconds: 2 } }, /peerProbe\.timeoutSeconds \(2\) must be below peerProbe\.intervalSeconds \(2\)/],
    ['node name', { kubernetes: { nodeName: 'Not A Name' } }, /kubernetes\.nodeName/],
    ['configMap', { kubernetes: { configMap: 'no-namespace' } }, /"namespace\/name"/],
    ['kubeconfig', { kubernetes: { kubeconfig: 'relative' } }, /kubernetes\.kubeconfig must be an absolute path/],
    ['log level', { logLevel: 'loud' }, /logLevel must be one of/],
    ['CNI socket past sun_path, in bytes', { cni: { socket: `/run/${'é'.repeat(52)}.sock` } }, /cni\.socket is 114 bytes long; a unix socket path holds at most 107/],
    ['relative NRI socket', { nri: { socket: 'nri.sock' } }, /nri\.socket "nri\.sock" must be an absolute path/],
    ['CRI socket past sun_path', { cri: { socket: `/run/${'c'.repeat(110)}` } }, /cri\.socket is 115 bytes long/],
    ['namespace isolation as text', { networks: { namespaceIsolation: 'yes' } }, /networks\.namespaceIsolation must be true or false/],
    ['repair on notice as text', { repairOnNotice: 'yes' }, /repairOnNotice must be true or false/],
    ['global namespaces', { networks: { globalNamespaces: ['Shared', 'ok'] } }, /networks\.globalNamespaces must list namespace names/],
    ['every-pod network, not a list', { networks: { everyPod: 'storage' } }, /networks\.everyPod must list networks/],
    ['every-pod network, bad name', { networks: { everyPod: ['Storage', 'ok@eth0'] } }, /networks\.everyPod "Storage": the network name must be a lower-case DNS subdomain; networks\.everyPod "ok": interface eth0 is used twice/],
    ['every-pod network, two in an entry', { networks: { everyPod: ['a,b'] } }, /networks\.everyPod: one network per entry/],
    ['system namespaces', { networks: { systemNamespaces: ['Kube-System'] } }, /networks\.systemNamespaces must list namespace names/],
    ['relative pod-resources socket', { networks: { podResourcesSocket: 'kubelet.sock' } }, /networks\.podResourcesSocket must be an absolute path/],
    ['nodeIpam, two IPv4 pools', { kubernetes: { nodeName: 'n' }, nodeIpam: { clusterCIDRs: ['10.0.0.0/16', '10.1.0.0/16'] } }, /nodeIpam\.clusterCIDRs has two IPv4 CIDRs/],
    ['nodeIpam block size', { nodeIpam: { nodeMaskSizeIPv4: 31 } }, /nodeIpam\.nodeMaskSizeIPv4 must be a whole number from 8 to 30/],
    ['nodeIpam pool smaller than a block', { kubernetes: { nodeName: 'n' }, nodeIpam: { clusterCIDRs: ['10.0.0.0/25'] } }, /10\.0\.0\.0\/25 is smaller than one Node's block \(\/24\)/],
    ['nodeIpam pool of too many blocks', { kubernetes: { nodeName: 'n' }, nodeIpam: { clusterCIDRs: ['fd00::/40'] } }, /fd00::\/40 cut into \/64 blocks makes more than 65536/],
    ['nodeIpam without a node name', { nodeIpam: { clusterCIDRs: ['10.0.0.0/16'] } }, /nodeIpam needs kubernetes\.nodeName/],
    ['nodeIpam with ranges', { kubernetes: { nodeName: 'n' }, ranges: ['10.0.0.0/24'], nodeIpam: { clusterCIDRs: ['10.0.0.0/16'] } }, /nodeIpam and ranges exclude each other/],
    ['nodeIpam key', { nodeIpam: { clusterCidr: '10.0.0.0/16' } }, /unknown setting "nodeIpam\.clusterCidr"/],
  ];
  for (const [name, raw, re] of cases) {
    it(`refuses ${name}`, () => assert.throws(() => parseConfig(raw), (e: Error) => e instanceof ConfigError && re.test(e.message)));
  }
  it('reads a config file as written: YAML tags, unknown directives, several documents, duplicate keys and alias bombs are refused, naming the file', () => {
    const refused: [string, RegExp][] = [
      ['mtu: !int 1400', /^kni\.yaml: YAML kni does not read: Unresolved tag: !int at line 1/],
      ['%TAGS x\n---\nmtu: 1400', /^kni\.yaml: YAML kni does not read: Unknown directive %TAGS/],
      ['mtu: 1400\n---\nmtu: 9000', /^kni\.yaml: holds 2 YAML documents; a config is one$/],
      ['mtu: 1400\nmtu: 9000', /^kni\.yaml: not valid YAML or JSON: Map keys must be unique/],
      ['a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]', /^kni\.yaml: not valid YAML or JSON: Excessive alias count/],
    ];
    for (const [text, re] of refused) assert.throws(() => parseConfigText(text, 'kni.yaml'), (e: Error) => e instanceof ConfigError && re.test(e.message), text);
    for (const empty of ['', '# nothing set\n', '~']) assert.equal(parseConfigText(empty, 'kni.yaml').mtu, defaultConfig().mtu);
    assert.equal(parseConfigText('%YAML 1.2\n---\nmtu: 1400\n', 'kni.yaml').mtu, 1400);
    assert.equal(parseConfigText('{"mtu": 1400}', 'kni.yaml').mtu, 1400);
  });
  it('vxlan.txChecksumOffload: "auto" turns it off on kernels before 5.7 (Calico\'s rule) and leaves it as it is after; true and false are obeyed', () => {
    assert.equal(parseConfig({}).vxlan.txChecksumOffload, 'auto');
    assert.equal(parseConfig({ vxlan: { txChecksumOffload: false } }).vxlan.txChecksumOffload, false);
    for (const [release, want] of [['4.18.0-553.el8_10.x86_64', false], ['5.4.0-150-generic', false], ['5.6.19', false], ['5.7.0', undefined], ['6.18.44-fc-v657', undefined]] as const) {
      assert.equal(txChecksumWanted('auto', release), want, release);
    }
    assert.equal(txChecksumWanted(true, '4.18.0'), true);
    assert.equal(txChecksumWanted(false, '6.8.0'), false);
  });
  it('takes the pod ranges from the Node when a node name is set and no ranges are given (KNI_NODE_NAME fills the name)', () => {
    const saved = process.env.KNI_NODE_NAME;
    try {
      delete process.env.KNI_NODE_NAME;
      assert.equal(parseConfig({}).rangesFromNode, false);
      const c = parseConfig({ kubernetes: { nodeName: 'node-a' } });
      assert.equal(c.rangesFromNode, true);
      assert.deepEqual(c.ranges, []);
      assert.equal(parseConfig({ kubernetes: { nodeName: 'node-a' }, ranges: ['10.9.0.0/24'] }).rangesFromNode, false, 'static ranges win');
      // Without node IPAM, kni's own hands the Node its ranges (through the Node too).
      const pool = parseConfig({ kubernetes: { nodeName: 'node-a' }, nodeIpam: { clusterCIDRs: ['10.244.0.0/16', 'fd00:10:244::/56'], nodeMaskSizeIPv6: 72 } });
      assert.equal(pool.rangesFromNode, true);
      assert.deepEqual({ ...pool.nodeIpam, clusterCIDRs: pool.nodeIpam.clusterCIDRs.map((c) => c.text) }, { clusterCIDRs: ['10.244.0.0/16', 'fd00:10:244::/56'], nodeMaskSizeIPv4: 24, nodeMaskSizeIPv6: 72, configMap: 'kube-system/kni-node-cidrs' });
      process.env.KNI_NODE_NAME = 'from-env';
      assert.equal(parseConfig({}).kubernetes.nodeName, 'from-env');
      process.env.KNI_NODE_NAME = 'Bad_Name';
      assert.throws(() => parseConfig({}), /KNI_NODE_NAME "Bad_Name" is not a Node name/);
    } finally {
      if (saved === undefined) delete process.env.KNI_NODE_NAME;
      else process.env.KNI_NODE_NAME = saved;
    }
  });
  it('tells a live change from one that needs a restart', async () => {
    const { diffConfig } = await import('../plugin/kube/config-watch');
    const cur = parseConfig({ kubernetes: { nodeName: 'n' } });
    cur.ranges = [parseCidr('10.244.1.0/24')]; // adopted from the Node: not a change
    assert.deepEqual(diffConfig(cur, parseConfig({ kubernetes: { nodeName: 'n' }, logLevel: 'debug', backend: 'vxlan', masquerade: false })), { live: ['logLevel', 'backend', 'masquerade'], fixed: [] });
    assert.deepEqual(diffConfig(cur, parseConfig({ kubernetes: { nodeName: 'n' }, bridge: 'br9', mtu: 1400 })), { live: [], fixed: ['bridge', 'mtu'] });
    // CIDRs compare by their text (a bigint inside them does not go through JSON).
    const withCidrs = parseConfig({ kubernetes: { nodeName: 'n' }, nonMasqueradeCIDRs: ['192.0.2.0/24'] });
    assert.deepEqual(diffConfig(cur, withCidrs), { live: ['nonMasqueradeCIDRs'], fixed: [] });
    assert.deepEqual(diffConfig(withCidrs, parseConfig({ kubernetes: { nodeName: 'n' }, nonMasqueradeCIDRs: ['192.0.2.9/24'] })), { live: [], fixed: [] });
    assert.deepEqual(diffConfig(cur, parseConfig({ kubernetes: { nodeName: 'n' }, ranges: ['10.9.0.0/24'] })).fixed, ['ranges', 'rangesFromNode']);
  });
  it('names every problem at once', () => {
    assert.throws(() => parseConfig({ mtu: 1, ranges: ['x'] }), /mtu 1.*not a CIDR|not a CIDR.*mtu 1/);
  });
});

describe('validation', () => {
  const bad = (fn: () => unknown, re: RegExp) =>
    assert.throws(fn, (e: Error) => e instanceof KniError && e.code === 'INVALID_ARGUMENT' && re.test(e.message));
  it('sandbox ids', () => {
    assert.equal(validate.sandboxId('a'.repeat(64)), 'a'.repeat(64));
    bad(() => validate.sandboxId(''), /empty/);
    bad(() => validate.sandboxId('a'.repeat(129)), /129 characters/);
    bad(() => validate.sandboxId('a/b'), /characters/);
    bad(() => validate.sandboxId('..'), /characters/);
  });
  it('interface names', () => {
    assert.equal(validate.interfaceName('eth0'), 'eth0');
    bad(() => validate.interfaceName('a'.repeat(16)), /16 bytes/);
    bad(() => validate.interfaceName('ééééééééé'), /18 bytes/);
    for (const n of ['a/b', 'a:b', 'a b', '..', '.']) bad(() => validate.interfaceName(n), /not a valid interface name/);
  });
  it('netns paths: the form only (where one leads is checked on the opened file)', () => {
    bad(() => validate.netnsPath('run/netns/x'), /not absolute/);
    bad(() => validate.netnsPath('/run/netns/../../etc/passwd'), /not normalised/);
    bad(() => validate.netnsPath('/run/netns/x/'), /not normalised/);
    bad(() => validate.netnsPath('/run/netns/a\0b'), /not a valid path/);
    assert.equal(validate.netnsPath(`/proc/${process.pid}/ns/net`), `/proc/${process.pid}/ns/net`);
  });
});
