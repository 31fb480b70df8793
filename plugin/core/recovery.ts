// Recovery: the kernel and kni's records disagree. Rebuild (records lost, kernel objects still
// there) runs once at start; reconcile (the kernel drifted behind kni's back) at start, every
// minute and on demand. Neither ever enters a netns other than the one a record was wired in.
import fs from 'node:fs';
import { log } from './log';
import type { Config } from './config';
import type { EventLog } from './events';
import type { KeyedMutex } from './keyed-mutex';
import type { NodeLifecycle } from './node-lifecycle';
import { CheckParts, checkRecord, interfaceProblems } from './sandbox-check';
import { unwireSandbox, wireSandbox, WiringParts } from './sandbox-wiring';
import type { CniNetwork } from '../cni/cni-network';
import type { ExtensionRegistry } from '../extensions/extension-registry';
import type { Ipam } from '../ipam/ipam';
import type { StateStore } from '../store/state-store';
import { isHostVethName } from './runtime-types';
import * as validate from './validate';
import { addrList } from '../netlink/addr';
import { Link, linkList } from '../netlink/link';
import { nsidOf } from '../netlink/nsid';
import { socketInNetns } from '../netns/netns';
import { isNetnsPin, NetnsHandle, openNetns, reopenRecordedNetns } from '../netns/open-netns';
import { unwirePod, VETH_ALIAS_PREFIX } from '../pod/pod-wiring';
import { InterfaceRecord, NetnsRecord, SandboxRecord } from '../store/records';
import { repairTap } from './vm-tap';
import { ifbName, kniIfbs, removeIfb } from '../pod/bandwidth';
import { isBuiltIn } from './network-backend';
import { driftFindings } from '../observe/metrics';
import { conntrackFill, conntrackWarning } from '../node/conntrack-fill';
import { hostFirewallNow } from '../node/host-firewall';

/** What reconcile uses of the runtime. */
export interface ReconcileParts extends WiringParts, CheckParts {
  readonly cfg: Config;
  readonly sandboxes: Map<string, SandboxRecord>;
  readonly netns: Map<string, NetnsRecord>;
  readonly store: StateStore;
  readonly ipam: Ipam;
  readonly locks: KeyedMutex;
  readonly events: EventLog;
  readonly cni?: CniNetwork;
  readonly extensions: Pick<ExtensionRegistry, 'gateReason'>;
  readonly node: Pick<NodeLifecycle, 'bridgeIndex' | 'ensure' | 'status' | 'warn' | 'warning' | 'repairDrift' | 'syncHostPorts'>;
  release(rec: SandboxRecord, releaseNetns: boolean, netnsEnding?: boolean): Promise<void>;
  removeInterface(rec: SandboxRecord, itf: InterfaceRecord): Promise<void>;
}

/** One finding: counted by the object it is about, logged, and answered in the report. */
type Found = (object: 'node_network' | 'sandbox' | 'leftover' | 'host_ports', msg: string, fields: Record<string, unknown>) => void;

export interface ReconcileReport {
  repaired: string[];
  released: string[];
  removedVeths: string[];
  findings: string[];
}

/**
 * For every kni veth on the node that no record owns, finds the pod netns its peer lives in
 * (by nsid, among the netns pins kni may use and every process's netns), reads the pod end's
 * addresses and writes the sandbox record again: no address in use is ever handed out twice.
 * kni netns pins without a record get theirs back. Runs at start, before reconcile.
 */
export function rebuildFromKernel(rt: ReconcileParts): void {
  const orphans = unownedHostVeths(rt).filter((l) => l.alias.startsWith(VETH_ALIAS_PREFIX));
  const byNsid = orphans.length ? netnsByNsid(rt) : new Map<number, NetnsHandle>();
  try {
    for (const l of orphans) {
      const id = l.alias.slice(VETH_ALIAS_PREFIX.length);
      const ns = byNsid.get(l.peerNetnsId);
      try {
        validate.sandboxId(id);
        if (!ns) throw new Error(`the netns of its peer (nsid ${l.peerNetnsId}) is not among the pins or any process's netns`);
        if (rt.sandboxes.has(id)) throw new Error(`sandbox ${id} already has a record with another veth`);
        const itf = readPodEnd(rt, ns, l.peerIndex, l.name, l.master === 0);
        const lost = rt.ipam.restore(id, itf.addresses);
        if (lost.length) throw new Error(`its addresses ${lost.map((a) => a.address).join(', ')} are held by another sandbox`);
        const rec: SandboxRecord = {
          id, phase: 'attached', pod: { name: '', namespace: '', uid: '' }, labels: {}, annotations: {}, runtimeHandler: '', kind: 'container',
          netnsPath: ns.path, netnsInode: ns.inode, ownedNetns: '', interfaces: [itf], createdAt: new Date().toISOString(),
        };
        rt.store.sandboxes.put(id, rec);
        rt.sandboxes.set(id, rec);
        log('warn', 'sandbox record rebuilt from the kernel', { sandbox: id, netns: ns.path, addresses: itf.addresses.map((a) => a.address) });
      } catch (e) {
        log('error', 'a kni veth has no record and cannot be rebuilt; reconcile will delete it', { veth: l.name, sandbox: id, error: (e as Error).message });
      }
    }
  } finally {
    for (const h of byNsid.values()) h.close();
  }
  for (const name of unrecordedPins(rt)) {
    const path = `${rt.cfg.netnsDir}/${name}`;
    const owner = [...rt.sandboxes.values()].find((r) => r.netnsPath === path);
    const n: NetnsRecord = { name, path, pod: owner?.pod ?? { name: '', namespace: '', uid: '' }, sandboxId: owner?.id ?? '', createdAt: new Date().toISOString() };
    rt.store.netns.put(name, n);
    rt.netns.set(name, n);
    if (owner) {
      owner.ownedNetns = name;
      rt.store.sandboxes.put(owner.id, owner);
    }
    log('warn', 'netns record rebuilt from its pin', { netns: path, sandbox: n.sandboxId });
  }
}

const ownedVeths = (rt: ReconcileParts): Set<string> => new Set([...rt.sandboxes.values()].flatMap((r) => r.interfaces.map((i) => i.hostVeth)));

/**
 * kni host veths on the node that no record names. Listed before the owners are collected:
 * an attach records its veth before it creates it, so a veth listed here has no attach in flight.
 */
function unownedHostVeths(rt: ReconcileParts): Link[] {
  const onNode = linkList(rt.host).filter((l) => l.kind === 'veth' && isHostVethName(l.name));
  const owned = ownedVeths(rt);
  return onNode.filter((l) => !owned.has(l.name));
}

/** kni-made netns pins (kni-<16 hex>) under netnsDir that have no record. */
function unrecordedPins(rt: ReconcileParts): string[] {
  let names: string[];
  try {
    names = fs.readdirSync(rt.cfg.netnsDir);
  } catch {
    return [];
  }
  return names.filter((n) => {
    if (!/^kni-[0-9a-f]{16}$/.test(n) || rt.netns.has(n)) return false;
    const p = `${rt.cfg.netnsDir}/${n}`;
    if (isNetnsPin(p)) return true;
    fs.rmSync(p, { force: true }); // an empty file a crash left between creating it and the pin
    return false;
  });
}

/**
 * nsid → an open netns: pins under the allowed roots first, then /proc/<pid>/ns/net. Every
 * candidate is opened as an untrusted path is (a FIFO or any other file there is skipped, never
 * waited on); the caller closes the handles.
 */
function netnsByNsid(rt: ReconcileParts): Map<number, NetnsHandle> {
  const out = new Map<number, NetnsHandle>();
  const candidates: string[] = [];
  for (const root of new Set([rt.cfg.netnsDir, ...rt.cfg.allowedNetnsRoots])) {
    try {
      for (const f of fs.readdirSync(root)) candidates.push(`${root}/${f}`);
    } catch {
      // a root that does not exist on this node
    }
  }
  for (const pid of fs.readdirSync('/proc').filter((p) => /^[1-9][0-9]*$/.test(p))) candidates.push(`/proc/${pid}/ns/net`);
  for (const p of candidates) {
    let h: NetnsHandle;
    try {
      h = openNetns(p, { allowedRoots: 'any' });
    } catch {
      continue; // not a netns, the node's own, or gone meanwhile
    }
    let nsid = -1;
    try {
      nsid = nsidOf(rt.host, h.fd);
    } catch {
      // no nsid for it
    }
    if (nsid >= 0 && !out.has(nsid)) out.set(nsid, h);
    else h.close();
  }
  return out;
}

/**
 * The pod end of a veth as an interface record: name, MAC, MTU and kni's addresses on it.
 * routed: the host end is on no bridge, and the pod's addresses are /32 and /128.
 */
function readPodEnd(rt: ReconcileParts, ns: NetnsHandle, index: number, hostVeth: string, routed: boolean): InterfaceRecord {
  const pod = socketInNetns(ns.fd);
  try {
    const link = linkList(pod).find((x) => x.index === index);
    if (!link) throw new Error(`no interface ${index} in ${ns.path}`);
    const addresses = addrList(pod)
      .filter((a) => a.index === index)
      .map((a) => {
        const d = rt.ipam.describe(a.address);
        return d && routed ? { ...d, prefixLength: a.prefixLength } : d;
      })
      .filter((a): a is NonNullable<typeof a> => a !== undefined);
    if (!addresses.length) throw new Error(`${link.name} in ${ns.path} has no address in the pod ranges`);
    return { name: link.name, hostVeth, mac: link.mac, mtu: link.mtu, addresses, ...(routed ? { routed } : {}) };
  } finally {
    pod.close();
  }
}

const inFlight = new WeakMap<ReconcileParts, Promise<ReconcileReport>>();

/**
 * Compares every record with the kernel. A sandbox whose netns is gone, or whose path now
 * names another netns, is released (kni never enters that other netns); one whose veth (or an
 * address on it) is gone is wired again from its record (same addresses); a release that could
 * not finish earlier is finished; a kni veth that no record owns is deleted. Each finding is
 * logged and reported. One reconcile at a time: a second caller shares the running one.
 */
export function reconcile(rt: ReconcileParts, opts: { nodeJustSetUp?: boolean } = {}): Promise<ReconcileReport> {
  let running = inFlight.get(rt);
  if (!running) {
    running = reconcileNow(rt, opts.nodeJustSetUp === true).finally(() => inFlight.delete(rt));
    inFlight.set(rt, running);
  }
  return running;
}

/** A reconcile that begins after the one running now, if any: it sees what changed since that one began. */
export async function reconcileAfterRunning(rt: ReconcileParts): Promise<ReconcileReport> {
  await inFlight.get(rt)?.catch(() => undefined);
  return reconcile(rt);
}

/** nodeJustSetUp: the node network was set up moments ago (the start): its drift is not looked for. */
async function reconcileNow(rt: ReconcileParts, nodeJustSetUp: boolean): Promise<ReconcileReport> {
  const report: ReconcileReport = { repaired: [], released: [], removedVeths: [], findings: [] };
  const found: Found = (object, msg, fields) => {
    report.findings.push(msg);
    driftFindings.inc({ object });
    log('warn', `reconcile: ${msg}`, fields);
  };
  // Pods are checked against a node that is set up: a bridge deleted behind kni's back is made
  // again first, and the pods whose ports it took are then re-wired below.
  const before = rt.node.status();
  try {
    // Waiting for pod ranges from the Node, or for a required extension, is not drift: nothing
    // to repair (and nothing to report each minute) until they come.
    if (rt.cfg.ranges.length || rt.cni) {
      await rt.node.ensure(true);
      if (!before.ready && before.reason !== rt.extensions.gateReason()) found('node_network', `node network was not ready (${before.reason}); set up again`, { bridge: rt.cfg.bridge });
    }
  } catch (e) {
    found('node_network', `node network is not ready and cannot be set up: ${(e as Error).message}`, { bridge: rt.cfg.bridge });
  }
  const fill = conntrackFill();
  rt.node.warn('conntrack', conntrackWarning(fill, rt.node.warning('conntrack') !== undefined), { ...fill });
  rt.node.warn('host-firewall', hostFirewallNow(rt.cfg));
  // Then what others undo without touching the bridge: its addresses, forwarding, masquerade.
  try {
    const drift = nodeJustSetUp ? [] : await rt.node.repairDrift();
    if (drift.length) found('node_network', `node network changed behind kni's back (${drift.join('; ')}); set up again`, { bridge: rt.cfg.bridge });
  } catch (e) {
    found('node_network', `node network changed behind kni's back and cannot be set up again: ${(e as Error).message}`, { bridge: rt.cfg.bridge });
  }
  const release = async (rec: SandboxRecord, why: string, releaseNetns = true) => {
    try {
      await rt.release(rec, releaseNetns);
      report.released.push(rec.id);
      rt.events.emit('released', rec, why);
      found('sandbox', `sandbox ${rec.id}: ${why}; released its addresses and veth`, { sandbox: rec.id });
    } catch (e) {
      found('sandbox', `sandbox ${rec.id}: ${why}; cannot release it yet: ${(e as Error).message}`, { sandbox: rec.id });
    }
  };
  for (const id of [...rt.sandboxes.keys()]) {
    await rt.locks.run(id, async () => {
      const rec = rt.sandboxes.get(id);
      if (!rec) return;
      if (rec.phase !== 'attached') return release(rec, `an earlier ${rec.phase === 'detaching' ? 'detach' : 'rolled-back attach'} did not finish`, rec.phase === 'detaching');
      const ns = reopenRecordedNetns(rec.netnsPath, rec.netnsInode);
      if (ns.state === 'gone') return release(rec, `netns ${rec.netnsPath} is gone`);
      if (ns.state === 'other') {
        // The path is not ours any more: drop kni's record of it without unpinning what is there.
        const owned = rt.netns.get(rec.ownedNetns);
        if (owned) {
          rt.store.netns.delete(owned.name);
          rt.netns.delete(owned.name);
        }
        return release(rec, ns.reason, false);
      }
      try {
        // An interface that a removal or add left half done is removed (its networks annotation re-adds it).
        for (const itf of rec.interfaces.filter((i) => i.adding || i.removing)) {
          await rt.removeInterface(rec, itf).then(() => found('sandbox', `sandbox ${rec.id}: interface ${itf.name} was left half added or removed; removed`, { sandbox: rec.id }), (e) => found('sandbox', `sandbox ${rec.id}: cannot remove half-done interface ${itf.name}: ${(e as Error).message}`, { sandbox: rec.id }));
        }
        // A CNI network's interfaces are the plugins' to check (CHECK): drift is reported, not re-wired.
        for (const itf of rec.interfaces.filter((i) => !isBuiltIn(i))) {
          const problems = await interfaceProblems(rt, rec, itf, ns.handle);
          if (problems.length) found('sandbox', `sandbox ${rec.id}: CNI CHECK failed: ${problems.join('; ')}`, { sandbox: rec.id });
        }
        if (rec.interfaces.some(isBuiltIn)) await repair(rt, rec, ns.handle, report, found);
        if (rt.sandboxes.get(rec.id) === rec) await repairTaps(rt, rec, ns.handle, report, found);
      } finally {
        ns.handle.close();
      }
    });
  }
  for (const l of unownedHostVeths(rt)) await removeStrayVeth(rt, l, report, found);
  // ifb devices of pods no record holds (a crash between shaping and the record's release).
  const shaped = new Set([...rt.sandboxes.values()].filter((r) => r.bandwidth).map((r) => ifbName(r.id)));
  for (const i of kniIfbs(rt.host)) {
    if (shaped.has(i.name)) continue;
    removeIfb(rt.host, i.name, i.index);
    report.removedVeths.push(i.name);
    found('leftover', `removed ifb ${i.name} that no sandbox record owns`, { ifb: i.name, sandbox: i.sandbox });
  }
  // Host ports rewritten from the records (no call at all while no pod has any).
  if (rt.cfg.ranges.length) await rt.node.syncHostPorts().catch((e) => found('host_ports', `cannot write host ports: ${(e as Error).message}`, {}));
  return report;
}

/** A vm sandbox's taps deleted or set down behind kni's back, whatever network wired the interface: put back. */
async function repairTaps(rt: ReconcileParts, rec: SandboxRecord, ns: NetnsHandle, report: ReconcileReport, found: Found): Promise<void> {
  for (const itf of rec.interfaces.filter((i) => i.tap)) {
    try {
      const problems = repairTap(itf, ns);
      if (!problems.length) continue;
      if (!report.repaired.includes(rec.id)) report.repaired.push(rec.id);
      rt.events.emit('repaired', rec, problems.join('; '));
      const missing = problems.some((p) => p.endsWith('missing'));
      found('sandbox', `sandbox ${rec.id}: ${problems.join('; ')}; ${missing ? 'made again (a VMM that had it open keeps the deleted one: restart the VM)' : 'set up again'}`, { sandbox: rec.id });
    } catch (e) {
      found('sandbox', `sandbox ${rec.id}: cannot put the VM's tap ${itf.tap} of ${itf.name} back: ${(e as Error).message}`, { sandbox: rec.id });
    }
  }
}

async function repair(rt: ReconcileParts, rec: SandboxRecord, ns: NetnsHandle, report: ReconcileReport, found: Found): Promise<void> {
  if (rec.netnsInode === undefined) {
    rec.netnsInode = ns.inode; // a record from before kni kept the inode: remember it from now on
    rt.store.sandboxes.put(rec.id, rec);
  }
  const problems = checkRecord(rt, rec, ns);
  if (!problems.length) return;
  try {
    await unwireSandbox(rec);
    await wireSandbox(rt, rec, ns);
    report.repaired.push(rec.id);
    rt.events.emit('repaired', rec, problems.join('; '));
    if (problems.some((p) => p.includes('lacks address'))) rt.events.emit('address_changed', rec, 'addresses restored from the record');
    found('sandbox', `sandbox ${rec.id}: ${problems.join('; ')}; wired again with the same addresses`, { sandbox: rec.id });
  } catch (e) {
    await rt.release(rec, true).catch(() => undefined);
    report.released.push(rec.id);
    found('sandbox', `sandbox ${rec.id}: ${problems.join('; ')}; cannot wire it again (${(e as Error).message}); released`, { sandbox: rec.id });
  }
}

/**
 * Deletes a kni veth no record owned when the list was taken. Ownership is checked again under
 * the sandbox's lock (an attach of it may have begun since), and the delete names the link's
 * index, so a veth an attach made meanwhile under the same name is never the one deleted.
 */
async function removeStrayVeth(rt: ReconcileParts, l: Link, report: ReconcileReport, found: Found): Promise<void> {
  const id = l.alias.startsWith(VETH_ALIAS_PREFIX) ? l.alias.slice(VETH_ALIAS_PREFIX.length) : '';
  const remove = async () => {
    if (ownedVeths(rt).has(l.name)) return;
    try {
      unwirePod({ hostVeth: l.name, index: l.index });
      report.removedVeths.push(l.name);
      found('leftover', `veth ${l.name} belongs to no sandbox; deleted`, { veth: l.name });
    } catch (e) {
      found('leftover', `veth ${l.name} belongs to no sandbox; cannot delete it: ${(e as Error).message}`, { veth: l.name });
    }
  };
  let lockable = false;
  try {
    lockable = validate.sandboxId(id) === id;
  } catch {
    // an alias that is not a sandbox id: nothing to lock
  }
  await (lockable ? rt.locks.run(id, remove) : remove());
}
