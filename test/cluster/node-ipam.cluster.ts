// A cluster made without node IPAM (kube-controller-manager --allocate-node-cidrs=false: its Nodes
// get no spec.podCIDRs): kni's nodeIpam hands each Node a block of the cluster's pod CIDRs,
// recorded in one ConfigMap and set as the Node's spec.podCIDRs, as node IPAM would have.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { cidrContains, parseCidr, parseIp } from '../../plugin/ipam/ip';
import { waitFor } from '../helpers/wait';
import { masqueradeTable } from '../helpers/masquerade-table';
import { apply, BIN, CL, cluster, clusterUp, getFromNode, KUBECONFIG, knictl, kniWith, kubectl, kubectlJson, POD, WORKERS } from './cluster-helpers';
import { connectKube } from '../../plugin/kube/kube-api';
import { claimNodeCidrs } from '../../plugin/kube/node-cidr-pool';

const podIps = (name: string): string[] => kubectlJson('get', 'pod', name).status.podIPs?.map((x: any) => x.ip) ?? [];
/** Each Node's spec.podCIDRs, as "v4,v6"; those kni's nodeIpam set carry its annotation saying so. */
const podCidrs = () => Object.fromEntries(kubectlJson('get', 'nodes').items.map((n: any) => {
  const set = (n.spec.podCIDRs ?? []).join(',');
  assert.equal(n.metadata.annotations?.['kni.dev/node-ipam'], set || undefined, n.metadata.name);
  return [n.metadata.name, set];
}));

describe('cluster: kni\'s own node IPAM, in a cluster made without it', function () {
  this.timeout(300_000);

  before(() => {
    cluster('down');
    clusterUp({ KNI_CLUSTER_NODE_IPAM: '0' });
  });
  after(() => {
    cluster('down');
  });

  it('each kni claims its own blocks (recorded in the ConfigMap, set as its Node\'s spec.podCIDRs), the nodes become Ready, pods reach across nodes, and a restart keeps the blocks', async () => {
    for (const n of kubectlJson('get', 'nodes').items) assert.equal(n.spec.podCIDRs, undefined, `${n.metadata.name} has podCIDRs: node IPAM is on`);
    // cluster.sh kni waits for every node to be Ready.
    kniWith('nodeIpam: { clusterCIDRs: [10.244.0.0/16, "fd00:10:244::/56"] }\n');
    const blocks = podCidrs();
    const all = WORKERS.map((w) => blocks[`kc-${w}`]);
    for (const b of all) assert.match(b, /^10\.244\.\d+\.0\/24,fd00:10:244:[0-9a-f:]*\/64$/);
    assert.equal(new Set(all.map((b) => b.split(',')[0])).size, WORKERS.length, `two nodes got one block: ${all.join(' ')}`);
    assert.equal(new Set(all.map((b) => b.split(',')[1])).size, WORKERS.length, `two nodes got one block: ${all.join(' ')}`);
    assert.deepEqual(kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-node-cidrs').data, blocks);
    // The manifest applied again (an upgrade) keeps kni's entries: it ships the ConfigMap with no data.
    execFileSync('kubectl', ['--kubeconfig', KUBECONFIG, 'apply', '-l', 'kni.dev/part=setup', '-f', 'kind-config/kni-daemonset.yaml'], { encoding: 'utf8', env: { ...process.env, PATH: `${BIN}:${process.env.PATH}` } });
    assert.deepEqual(kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-node-cidrs').data, blocks);
    // One place to look: knictl node says where the ranges come from.
    for (const w of WORKERS) {
      const c = knictl(w, 'node').cluster;
      assert.deepEqual([c.node_pod_cidrs.join(','), c.ranges.join(','), c.pod_cidrs_source, c.ranges_problem], [blocks[`kc-${w}`], blocks[`kc-${w}`], "kni's nodeIpam", '']);
    }
    const shown = execFileSync(process.execPath, ['dist/plugin/knictl.js', '--socket', `${CL}/${WORKERS[0]}/root/run/kni/kni.sock`, 'node'], { encoding: 'utf8' });
    assert.ok(shown.includes(`pod CIDRs of the Node (kni's nodeIpam): ${blocks[`kc-${WORKERS[0]}`]}`), shown);

    for (const w of WORKERS) apply(POD(`ipam-${w}`, w));
    await waitFor(() => WORKERS.every((w) => podIps(`ipam-${w}`).length === 2 && kubectlJson('get', 'pod', `ipam-${w}`).status.phase === 'Running'), 120_000, () => kubectl('get', 'pods', '-o', 'wide'));
    for (const w of WORKERS) {
      const [v4, v6] = podIps(`ipam-${w}`);
      const [b4, b6] = blocks[`kc-${w}`].split(',');
      assert.ok(cidrContains(parseCidr(b4), 4, parseIp(v4).value), `${v4} outside ${b4}`);
      assert.ok(cidrContains(parseCidr(b6), 6, parseIp(v6).value), `${v6} outside ${b6}`);
    }
    // Across nodes, both families: pod → pod, and node → the other node's pod.
    const [one, two] = WORKERS;
    for (const ip of podIps(`ipam-${two}`)) kubectl('exec', `ipam-${one}`, '--', '/bin/busybox', 'ping', '-c', '1', '-W', '5', ip);
    for (const ip of podIps(`ipam-${one}`)) kubectl('exec', `ipam-${two}`, '--', '/bin/busybox', 'ping', '-c', '1', '-W', '5', ip);
    assert.match(getFromNode(one, podIps(`ipam-${two}`)[0], 80), /^HTTP\/1\.[01] 200/);
    // Masquerade keeps the whole pool, not node by node.
    const keep = masqueradeTable(`kc-${one}`)!.sets;
    assert.deepEqual([keep.keep4.filter((c) => c.startsWith('10.244.')), keep.keep6.filter((c) => c.startsWith('fd00:10:244:'))], [['10.244.0.0/16'], ['fd00:10:244::/56']]);

    // kni restarted: the same blocks, from its Node; no new claim.
    const claims = () => fs.readFileSync(`${CL}/run/kni-${one}.log`, 'utf8').split('\n').filter((l) => l.includes('"msg":"pod ranges claimed from nodeIpam"'));
    assert.equal(claims().length, 1, claims().join('\n'));
    cluster(`kni-stop ${one}`);
    cluster(`kni-restart ${one}`);
    await waitFor(() => {
      try {
        execFileSync(process.execPath, ['dist/plugin/knictl.js', '--socket', `${CL}/${one}/root/run/kni/kni.sock`, 'ipam'], { stdio: 'ignore' });
        return true;
      } catch {
        return false;
      }
    }, 60_000, () => fs.readFileSync(`${CL}/run/kni-${one}.log`, 'utf8').slice(-2000));
    assert.deepEqual(podCidrs(), blocks);
    assert.deepEqual(kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-node-cidrs').data, blocks);
    assert.deepEqual(claims(), [], 'the restarted kni claimed again');
    for (const w of WORKERS) kubectl('delete', 'pod', `ipam-${w}`, '--wait=true');
  });

  it('claims made at once never share a block (the ConfigMap is written at the resourceVersion read); a deleted Node\'s block goes back to the pool', async () => {
    const api = connectKube(KUBECONFIG);
    const cfg = { clusterCIDRs: [parseCidr('10.250.0.0/20'), parseCidr('fd00:250::/60')], nodeMaskSizeIPv4: 24, nodeMaskSizeIPv6: 64, configMap: 'kube-system/kni-node-cidrs' };
    const names = Array.from({ length: 8 }, (_, i) => `kc-fake-${i}`);
    for (const n of names) apply(`apiVersion: v1\nkind: Node\nmetadata: {name: ${n}}\nspec: {taints: [{key: example.com/not-real, effect: NoSchedule}]}\n`);
    try {
      // The workers' entries are of another pool: kept, never taken as these.
      const got = await Promise.all(names.map((n) => claimNodeCidrs(api, cfg, n)));
      const texts = got.map((b) => b.map((c) => c.text).join(','));
      assert.equal(new Set(texts.map((t) => t.split(',')[0])).size, names.length, texts.join(' '));
      assert.equal(new Set(texts.map((t) => t.split(',')[1])).size, names.length, texts.join(' '));
      const data = kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-node-cidrs').data;
      for (const [i, n] of names.entries()) assert.equal(data[n], texts[i]);
      for (const w of WORKERS) assert.ok(data[`kc-${w}`], `kc-${w}'s entry dropped`);
      // Claimed again: the same.
      assert.deepEqual((await claimNodeCidrs(api, cfg, names[3])).map((c) => c.text).join(','), texts[3]);
      // A Node gone: its block is the lowest free again, and its entry goes as another is written.
      kubectl('delete', 'node', names[0]);
      apply(`apiVersion: v1\nkind: Node\nmetadata: {name: kc-fake-new}\nspec: {taints: [{key: example.com/not-real, effect: NoSchedule}]}\n`);
      const next = await claimNodeCidrs(api, cfg, 'kc-fake-new');
      assert.equal(next.map((c) => c.text).join(','), texts[0]);
      assert.equal(kubectlJson('-n', 'kube-system', 'get', 'configmap', 'kni-node-cidrs').data[names[0]], undefined);
      // Full: a pool of one block another Node holds (which one won it depends on the race above).
      const other = names.slice(1).find((n) => !data[n].startsWith('10.250.0.0/24'))!;
      await assert.rejects(claimNodeCidrs(api, { ...cfg, clusterCIDRs: [parseCidr('10.250.0.0/24')] }, other), new RegExp(`nodeIpam: 10\\.250\\.0\\.0/24 has no free /24 left for Node ${other} `));
    } finally {
      for (const n of [...names, 'kc-fake-new']) kubectl('delete', 'node', n, '--ignore-not-found');
    }
  });
});
