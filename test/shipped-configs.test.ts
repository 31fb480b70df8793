// The manifests and snippets kni ships (kind-config/), read by the parsers that will read them:
// kni's own config parser, and containerd's for its snippets.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { loadConfig, parseConfig } from '../plugin/core/config';
import { parseCidr } from '../plugin/ipam/ip';
import { packageRoot } from '../plugin/server/protos';

const KIND_CONFIG = path.join(packageRoot(), 'kind-config');
const text = (f: string): string => fs.readFileSync(path.join(KIND_CONFIG, f), 'utf8');
/** Every document of a multi-document YAML file in kind-config/. */
const documents = (f: string): any[] => YAML.parseAllDocuments(text(f)).map((d) => d.toJS());

describe('shipped configs', () => {
  it('kind-config/kni-config.yaml and the DaemonSet ConfigMap parse with the real parser', () => {
    const cfg = loadConfig(path.join(KIND_CONFIG, 'kni-config.yaml'));
    assert.equal(cfg.nri.enabled, true);
    assert.equal(cfg.cni.confDir, '/etc/cni/net.d');
    const docs = documents('kni-daemonset.yaml');
    const cm = docs.find((d) => d.kind === 'ConfigMap');
    assert.equal(parseConfig(YAML.parse(cm.data['config.yaml'])).cri.socket, '/run/containerd/containerd.sock');
    // The DaemonSet's kni takes its ranges from its Node: the downward API names it.
    const ds = docs.find((d) => d.kind === 'DaemonSet');
    const env = ds.spec.template.spec.containers[0].env;
    assert.deepEqual(env.find((e: any) => e.name === 'KNI_NODE_NAME').valueFrom, { fieldRef: { fieldPath: 'spec.nodeName' } });
    assert.equal(ds.spec.template.spec.serviceAccountName, 'kni');
    // The probes ask the metrics address kni is started with.
    const c0 = ds.spec.template.spec.containers[0];
    const metricsAddr: string = c0.command[c0.command.indexOf('--metrics-addr') + 1];
    for (const [probe, p] of [['readinessProbe', '/readyz'], ['livenessProbe', '/livez']]) {
      assert.equal(`${c0[probe].httpGet.host}:${c0[probe].httpGet.port}`, metricsAddr, probe);
      assert.equal(c0[probe].httpGet.path, p);
    }
    const saved = process.env.KNI_NODE_NAME;
    process.env.KNI_NODE_NAME = 'some-node';
    try {
      const c = parseConfig(YAML.parse(cm.data['config.yaml']));
      assert.equal(c.rangesFromNode, true);
      assert.equal(c.kubernetes.configMap, `${cm.metadata.namespace}/${cm.metadata.name}`);
    } finally {
      if (saved === undefined) delete process.env.KNI_NODE_NAME;
      else process.env.KNI_NODE_NAME = saved;
    }
  });
  it('the example extension DaemonSet and kni share the extension socket dir and kni\'s socket', () => {
    const load = (f: string) => documents(f).find((d) => d.kind === 'DaemonSet');
    const mounts = (ds: any) => new Map<string, string>(ds.spec.template.spec.containers[0].volumeMounts.map((m: any) => [m.mountPath, ds.spec.template.spec.volumes.find((v: any) => v.name === m.name).hostPath?.path ?? '']));
    const kni = mounts(load('kni-daemonset.yaml'));
    const ext = mounts(load('mesh-redirect-daemonset.yaml'));
    for (const p of ['/run/kni', '/run/kni-extensions']) assert.equal(kni.get(p), ext.get(p), p);
    // The kubelet's pod-resources socket where the default config looks for it.
    const podResources = path.dirname(parseConfig(undefined).networks.podResourcesSocket);
    assert.equal(kni.get(podResources), podResources);
    const devinfo = parseConfig(undefined).networks.deviceInfoDir;
    assert.equal(kni.get(devinfo), devinfo);
    const cmd: string[] = load('mesh-redirect-daemonset.yaml').spec.template.spec.containers[0].command;
    assert.ok(cmd[cmd.indexOf('--socket') + 1].startsWith('/run/kni-extensions/'));
  });
  it('kind-config/kind-cluster.yaml: several nodes, no default CNI, dual-stack pod subnet, NRI on', () => {
    const k = YAML.parse(text('kind-cluster.yaml'));
    assert.equal(k.networking.disableDefaultCNI, true);
    assert.equal(k.networking.ipFamily, 'dual');
    assert.deepEqual(k.networking.podSubnet.split(',').map((c: string) => parseCidr(c).family), [4, 6]);
    assert.ok(k.nodes.filter((n: any) => n.role === 'worker').length >= 2);
    assert.match(k.containerdConfigPatches[0], /\[plugins\."io\.containerd\.nri\.v1\.nri"\]\s*\n\s*disable = false/);
  });
  it('the Kata RuntimeClass handler is a vm in the default config and a runtime in every containerd and CRI-O snippet', () => {
    const docs = documents('runtimeclass-kata.yaml');
    const rc = docs.find((d) => d.kind === 'RuntimeClass');
    assert.equal(parseConfig(undefined).runtimeHandlers[rc.handler], 'vm');
    const pod = docs.find((d) => d.kind === 'Pod');
    assert.equal(pod.spec.runtimeClassName, rc.metadata.name);
    assert.equal(pod.metadata.annotations['kni.dev/runtime-handler'], rc.handler);
    for (const f of ['containerd-1.6.toml', 'containerd-1.7.toml', 'containerd-2.x.toml']) {
      const toml = text(f);
      assert.match(toml, new RegExp(`containerd\\.runtimes\\.${rc.handler}\\]\\s*\\n\\s*runtime_type = "io\\.containerd\\.kata\\.v2"`), f);
    }
    // The containerd installed here (1.6) reads the v2-format snippets itself.
    for (const f of ['containerd-1.6.toml', 'containerd-1.7.toml']) {
      const dump = execFileSync('containerd', ['--config', path.join(KIND_CONFIG, f), 'config', 'dump'], { encoding: 'utf8' });
      const table = dump.split(/\n\s*\[/).find((t) => t.startsWith('plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]'));
      assert.match(table ?? '', /runtime_type = "io\.containerd\.kata\.v2"/, f);
    }
    assert.match(text('crio/10-kni.conf'), new RegExp(`\\[crio\\.runtime\\.runtimes\\.${rc.handler}\\][^[]*runtime_type = "vm"`));
  });
});
