// Pure logic of the Kubernetes node agent: whether kni leaves its node, label selectors and
// NetworkPolicy verdicts, Nodes without podCIDRs, masquerade returns, contested podCIDRs, the
// Node cache, node IPAM's blocks.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { cidrsOverlap, formatIp, parseCidr, parseIp } from '../plugin/ipam/ip';
import { leavingFrom, selectsNode } from '../plugin/kube/leaving-node';
import { labelSelectorMatches } from '../plugin/kube/label-selectors';
import { unroutedPeersWarning } from '../plugin/kube/unrouted-peers';
import { shareRouting, slimNode } from '../plugin/kube/node-cache';
import { podCidrsOfNode } from '../plugin/kube/node-ranges';
import { freeBlock, nodePodCidrSource } from '../plugin/kube/node-cidr-pool';
import { unmasqueraded } from '../plugin/node/masquerade';
import { ClaimIndex, contestedClaims, rivalKey } from '../plugin/node/contested-cidrs';

describe('whether kni leaves its node as its pod stops (the preStop)', () => {
  const ds = (uid: string, deleting = false) => ({ metadata: { name: 'kni', uid, ...(deleting ? { deletionTimestamp: new Date() } : {}) } });
  const pod = (owner?: { kind: string; uid: string }) => ({ metadata: { name: 'kni-abc', ownerReferences: owner ? [{ apiVersion: 'apps/v1', kind: owner.kind, name: 'kni', uid: owner.uid, controller: true }] : [] } });
  it('stays while its DaemonSet stays (rolling update, restart, a deleted pod); leaves when it is deleted, deleting, replaced, or nothing restarts the pod; a force-deleted pod stays', () => {
    assert.equal(leavingFrom(pod({ kind: 'DaemonSet', uid: 'u1' }), ds('u1')).leaving, false);
    assert.match(leavingFrom(pod({ kind: 'DaemonSet', uid: 'u1' }), ds('u1')).reason, /DaemonSet kni stays/);
    assert.match(leavingFrom(pod({ kind: 'DaemonSet', uid: 'u1' }), undefined).reason, /DaemonSet kni is deleted/);
    assert.equal(leavingFrom(pod({ kind: 'DaemonSet', uid: 'u1' }), ds('u1', true)).leaving, true);
    assert.equal(leavingFrom(pod({ kind: 'DaemonSet', uid: 'u1' }), ds('u2')).leaving, true);
    assert.equal(leavingFrom(pod({ kind: 'ReplicaSet', uid: 'u1' }), 'none').leaving, true);
    assert.equal(leavingFrom(pod(), 'none').leaving, true);
    // Force-deleted (graceful deletion keeps the object through the preStop): kept, as a new pod follows.
    assert.equal(leavingFrom(undefined, 'none').leaving, false);
  });

  it('leaves a node its DaemonSet no longer selects (nodeSelector, required node affinity), as the DaemonSet controller then deletes its pod', () => {
    const node = { metadata: { name: 'n1', labels: { role: 'net', size: '8' } } };
    const on = (spec: object) => ({ ...ds('u1'), spec: { selector: {}, template: { spec: { containers: [], ...spec } } } });
    const owned = pod({ kind: 'DaemonSet', uid: 'u1' });
    assert.equal(leavingFrom(owned, on({ nodeSelector: { role: 'net' } }), node).leaving, false);
    assert.match(leavingFrom(owned, on({ nodeSelector: { role: 'edge' } }), node).reason, /no longer selects node n1/);
    const affinity = (terms: object[]) => ({ affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: terms } } } });
    const holds = (terms: object[]) => selectsNode(affinity(terms) as any, node as any);
    assert.equal(holds([{ matchExpressions: [{ key: 'role', operator: 'In', values: ['net', 'x'] }] }]), true);
    assert.equal(holds([{ matchExpressions: [{ key: 'role', operator: 'NotIn', values: ['net'] }] }]), false);
    assert.equal(holds([{ matchExpressions: [{ key: 'gpu', operator: 'DoesNotExist' }, { key: 'size', operator: 'Gt', values: ['4'] }] }]), true);
    assert.equal(holds([{ matchExpressions: [{ key: 'size', operator: 'Lt', values: ['4'] }] }, { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n1'] }] }]), true, 'terms are ORed');
    assert.equal(holds([{}]), false, 'an empty term matches no node');
    assert.equal(selectsNode(undefined, node as any), true);
  });
});

describe('label selectors (which NetworkPolicies select a pod)', () => {
  it('matchLabels and every expression must hold; an empty selector selects every pod; Gt, Lt and unknown operators select none', () => {
    const labels = { app: 'web', tier: 'front' };
    const m = (sel: object | undefined) => labelSelectorMatches(sel as any, labels);
    assert.equal(m(undefined), true);
    assert.equal(m({}), true);
    assert.equal(m({ matchLabels: { app: 'web' } }), true);
    assert.equal(m({ matchLabels: { app: 'web', tier: 'back' } }), false);
    assert.equal(m({ matchExpressions: [{ key: 'app', operator: 'In', values: ['db', 'web'] }, { key: 'tier', operator: 'Exists' }] }), true);
    assert.equal(m({ matchExpressions: [{ key: 'app', operator: 'NotIn', values: ['web'] }] }), false);
    assert.equal(m({ matchExpressions: [{ key: 'zone', operator: 'NotIn', values: ['a'] }, { key: 'zone', operator: 'DoesNotExist' }] }), true, 'a label it lacks is in no set');
    assert.equal(m({ matchLabels: { app: 'web' }, matchExpressions: [{ key: 'tier', operator: 'DoesNotExist' }] }), false);
    assert.equal(m({ matchExpressions: [{ key: 'app', operator: 'Gt', values: ['1'] }] }), false);
    assert.equal(m({ matchExpressions: [{ key: 'app', operator: 'Like', values: ['web'] }] }), false);
    assert.equal(labelSelectorMatches({ matchExpressions: [{ key: 'toString', operator: 'Exists' }] }, {}), false, 'no label from the object prototype');
  });
});

describe('other Nodes without podCIDRs (the node agent\'s warning)', () => {
  it('names them, says why their pods are unreachable, and points at node IPAM when no Node has podCIDRs and kni\'s ranges are its config\'s', () => {
    assert.equal(unroutedPeersWarning([], 1, false), undefined);
    assert.equal(unroutedPeersWarning(['c'], 2, false), "Node c has no spec.podCIDRs, and kni routes to other nodes' pods by them: their pods are unreachable from this node until node IPAM gives them podCIDRs");
    const none = unroutedPeersWarning(['h', 'g', 'f', 'e', 'd', 'c', 'b'], 7, true)!;
    assert.match(none, /^Nodes b, c, d, e, f and 2 more have no spec\.podCIDRs, .*: kni's ranges come from its config here, and no other Node has podCIDRs: is node IPAM off\? .*--allocate-node-cidrs/);
    // From the Node (or a CNI default network's), the same Nodes are only waiting for theirs.
    assert.match(unroutedPeersWarning(['b'], 1, false)!, /until node IPAM gives them podCIDRs$/);
    // Some other Node has podCIDRs: not a cluster without node IPAM.
    assert.match(unroutedPeersWarning(['b'], 2, true)!, /until node IPAM gives them podCIDRs$/);
  });
});

describe('where pod traffic keeps its source address (the masquerade keep sets)', () => {
  const c = (...t: string[]) => t.map(parseCidr);
  const texts = (l: ReturnType<typeof parseCidr>[]) => l.map((x) => x.text);
  it('is every pod CIDR of the cluster (side by side ones merged) and nonMasqueradeCIDRs; with nodeIpam the cluster\'s CIDRs stand for the nodes\' blocks in them', () => {
    const none = { clusterCIDRs: [], nodeMaskSizeIPv4: 24, nodeMaskSizeIPv6: 64, configMap: 'kube-system/kni-node-cidrs' };
    assert.deepEqual(texts(unmasqueraded({ ranges: c('10.1.0.0/24', 'fd00:1::/64'), nonMasqueradeCIDRs: c('192.0.2.0/24'), nodeIpam: none }, c('10.1.1.0/24'))), ['10.1.0.0/23', 'fd00:1::/64', '192.0.2.0/24']);
    const pool = { ...none, clusterCIDRs: c('10.1.0.0/16', 'fd00:1::/48') };
    // A peer's block outside the pool (set by another node IPAM before nodeIpam) still returns.
    assert.deepEqual(texts(unmasqueraded({ ranges: c('10.1.0.0/24', 'fd00:1::/64'), nonMasqueradeCIDRs: c('192.0.2.0/24'), nodeIpam: pool }, c('10.1.1.0/24', 'fd00:1:0:1::/64', '10.9.0.0/24'))), ['10.1.0.0/16', 'fd00:1::/48', '10.9.0.0/24', '192.0.2.0/24']);
  });
});

describe('Nodes\' podCIDRs that contest each other (peer routes refused)', () => {
  it('finds for each claim the first other node\'s claim overlapping it, as comparing every pair does, without comparing every pair', () => {
    // Claims of a few nodes, IPv4 and IPv6, nested, equal and disjoint, in one small space.
    const claim = fc.tuple(fc.constantFrom('a', 'b', 'c', 'd'), fc.boolean(), fc.integer({ min: 0, max: 255 }), fc.integer({ min: 20, max: 28 })).map(([node, v6, i, p]) => {
      const c = parseCidr(v6 ? `fd00:0:0:${(i << 4).toString(16)}::/${p + 36}` : `10.1.${i}.0/${p}`);
      return { node, cidr: parseCidr(`${formatIp(c.family, (c.base >> BigInt((c.family === 4 ? 32 : 128) - c.prefixLength)) << BigInt((c.family === 4 ? 32 : 128) - c.prefixLength))}/${c.prefixLength}`) };
    });
    fc.assert(fc.property(fc.array(claim, { maxLength: 30 }), (claims) => {
      const got = contestedClaims(claims);
      for (const c of claims) {
        const first = claims.find((o) => o.node !== c.node && cidrsOverlap(o.cidr, c.cidr));
        assert.equal(got.get(rivalKey(c.node, c.cidr)), first, `${c.node} ${c.cidr.text}`);
      }
    }), { seed: 55, numRuns: 2000 });
  });

  it('after claims leave the index, finds the same overlaps as comparing every pair of those left', () => {
    const claim = fc.tuple(fc.constantFrom('a', 'b', 'c', 'd'), fc.integer({ min: 0, max: 15 }), fc.integer({ min: 22, max: 26 })).map(([node, i, p]) => {
      const c = parseCidr(`10.1.${i << 4}.0/${p}`);
      return { node, cidr: parseCidr(`${formatIp(4, (c.base >> BigInt(32 - p)) << BigInt(32 - p))}/${p}`) };
    });
    fc.assert(fc.property(fc.array(fc.tuple(claim, fc.boolean()), { maxLength: 30 }), (pairs) => {
      const index = new ClaimIndex();
      for (const [c] of pairs) index.add(c);
      for (const [c, leaves] of pairs) if (leaves) index.remove(c);
      const left = pairs.filter(([, leaves]) => !leaves).map(([c]) => c);
      for (const [c] of pairs) {
        const want = left.filter((o) => o.node !== c.node && cidrsOverlap(o.cidr, c.cidr)).map((o) => `${o.node} ${o.cidr.text}`).sort();
        assert.deepEqual(index.overlapping(c.node, c.cidr).map((o) => `${o.node} ${o.cidr.text}`).sort(), want, `${c.node} ${c.cidr.text}`);
      }
    }), { seed: 56, numRuns: 1000 });
  });
});

describe('what kni keeps of a Node in its cache', () => {
  it('keeps the name, uid, resourceVersion, kni\'s annotation, podCIDRs (podCIDR on an old Node) and InternalIPs; drops the kubelet\'s status and managedFields', () => {
    const full = (ipam: boolean): any => ({
      metadata: { name: 'n1', uid: 'u1', resourceVersion: '42', labels: { a: 'b' }, annotations: { 'node.alpha.kubernetes.io/ttl': '0', ...(ipam ? { 'kni.dev/node-ipam': '10.1.0.0/24,fd00:1::/64' } : {}) }, managedFields: [{ manager: 'kubelet', fieldsV1: { 'f:status': {} } }] },
      spec: { podCIDR: '10.1.0.0/24', podCIDRs: ['10.1.0.0/24', 'fd00:1::/64'], providerID: 'x', taints: [{ key: 'k', effect: 'NoSchedule' }] },
      status: { addresses: [{ type: 'InternalIP', address: '172.16.0.1' }, { type: 'Hostname', address: 'n1' }], images: [{ names: ['busybox'], sizeBytes: 1 }], conditions: [{ type: 'Ready', status: 'True' }], nodeInfo: { kubeletVersion: 'v1' } },
    });
    for (const ipam of [true, false]) {
      const n = full(ipam);
      slimNode(n);
      assert.deepEqual(n, {
        metadata: { name: 'n1', uid: 'u1', resourceVersion: '42', ...(ipam ? { annotations: { 'kni.dev/node-ipam': '10.1.0.0/24,fd00:1::/64' } } : {}) },
        spec: { podCIDR: undefined, podCIDRs: ['10.1.0.0/24', 'fd00:1::/64'] },
        status: { addresses: [{ type: 'InternalIP', address: '172.16.0.1' }] },
      });
      assert.deepEqual(podCidrsOfNode(n).map((c) => c.text), podCidrsOfNode(full(ipam)).map((c) => c.text));
      assert.equal(nodePodCidrSource(n), nodePodCidrSource(full(ipam)));
    }
    // A Node from before podCIDRs keeps its podCIDR.
    const old: any = { metadata: { name: 'n3' }, spec: { podCIDR: '10.3.0.0/24' } };
    slimNode(old);
    assert.deepEqual(podCidrsOfNode(old).map((c) => c.text), ['10.3.0.0/24']);
    // A Node with nothing set stays valid.
    const bare: any = { metadata: { name: 'n2' } };
    slimNode(bare);
    assert.deepEqual(bare, { metadata: { name: 'n2' } });
  });

  it('a Node updated with the same routing fields takes the strings of the view kept for it: the same Node, one copy of them', () => {
    // As JSON.parse makes them: equal text, other strings.
    const parsed = (): any => JSON.parse(JSON.stringify({ metadata: { name: 'n1', resourceVersion: '43' }, spec: { podCIDRs: ['10.1.0.0/24', 'fd00:1::/64'] }, status: { addresses: [{ type: 'Hostname', address: 'n1' }, { type: 'InternalIP', address: '172.16.0.1' }, { type: 'InternalIP', address: 'fd00:16::1' }] } }));
    const view = { name: 'n1', internalIPs: ['172.16.0.1', 'fd00:16::1'], podCidrs: ['10.1.0.0/24', 'fd00:1::/64'] };
    const n = parsed();
    shareRouting(n, view);
    assert.deepEqual(n, parsed());
    assert.equal(n.spec.podCIDRs, view.podCidrs);
    assert.deepEqual(n.status.addresses.map((a: any) => a.address), ['n1', ...view.internalIPs]);
    // A Node from before podCIDRs keeps its spec as it is.
    const old: any = { metadata: { name: 'n1' }, spec: { podCIDR: '10.1.0.0/24' } };
    shareRouting(old, { ...view, podCidrs: ['10.1.0.0/24'], internalIPs: [] });
    assert.deepEqual(old, { metadata: { name: 'n1' }, spec: { podCIDR: '10.1.0.0/24' } });
  });
});

describe('nodeIpam: a Node\'s block from the cluster\'s pod CIDRs', () => {
  it('is the lowest block of the pool that no taken CIDR overlaps, whatever is taken; none when all are', () => {
    const pool = parseCidr('10.8.0.0/20');
    // Taken: anything from /18 (the whole pool and more) to /28 (part of one block), in and around the pool.
    const taken = fc.array(fc.tuple(fc.integer({ min: 0, max: 63 }), fc.integer({ min: 18, max: 28 })).map(([i, p]) => parseCidr(`${formatIp(4, (10n << 24n) + (8n << 16n) - (16n << 8n) + (BigInt(i) << 8n))}/${p}`)), { maxLength: 20 });
    fc.assert(fc.property(taken, (t) => {
      const blocks = Array.from({ length: 16 }, (_, i) => parseCidr(`10.8.${i}.0/24`));
      const free = blocks.filter((b) => !t.some((x) => cidrsOverlap(x, b)));
      const got = freeBlock(pool, 24, t);
      assert.equal(got?.text, free[0]?.text);
    }), { seed: 54, numRuns: 2000 });
    assert.equal(freeBlock(parseCidr('fd00:10:244::/56'), 64, [parseCidr('fd00:10:244::/64'), parseCidr('fd00:10:244:2::/64'), parseCidr('10.8.0.0/24')])?.text, 'fd00:10:244:1::/64');
  });
});
