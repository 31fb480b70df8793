// Start-up: the records of the state dir brought back — pins that exist, addresses reserved
// again, attaches and detaches a crash interrupted rolled back — then what the kernel still
// holds and no readable record describes rebuilt (recovery.ts).
import fs from 'node:fs';
import { log } from './log';
import type { PodWiring } from './config';
import { rebuildFromKernel, ReconcileParts } from './recovery';
import { removePinnedNetns } from '../netns/netns';
import { isNetnsPin } from '../netns/open-netns';
import { SandboxRecord } from '../store/records';
import { isBuiltIn } from './network-backend';
import { resumeAllocation } from '../ipam/allocation-cursor';

/** What restoring state at start uses of the runtime. */
export interface RestoreParts extends ReconcileParts {
  podLink: PodWiring;
}

export async function restoreState(rt: RestoreParts): Promise<void> {
    const netnsState = rt.store.netns.loadAll();
    const sandboxState = rt.store.sandboxes.loadAll();
    const problems = [...netnsState.problems, ...sandboxState.problems];
    for (const n of netnsState.records) {
      if (isNetnsPin(n.path)) {
        rt.netns.set(n.name, n);
      } else {
        removePinnedNetns(n.path); // the crash came before the pin: at most an empty file
        rt.store.netns.delete(n.name);
      }
    }
    const interrupted: SandboxRecord[] = [];
    const unfinished: SandboxRecord[] = [];
    for (const rec of sandboxState.records) {
      if (rec.backend === 'cni') {
        // Written before interfaces named their backend: all were the CNI default network's.
        for (const itf of rec.interfaces) Object.assign(itf, { backend: 'cni', cniName: itf.cniName ?? rt.cni?.name });
        delete rec.backend;
      }
      // A CNI network's addresses are its plugins' IPAM's, not kni's.
      const addresses = rec.interfaces.filter(isBuiltIn).flatMap((i) => i.addresses);
      const lost = rt.ipam.restore(rec.id, addresses);
      if (lost.length) log('error', 'sandbox record claims addresses held by another record or outside the ranges', { sandbox: rec.id, addresses: lost.map((a) => a.address) });
      rt.sandboxes.set(rec.id, rec);
      if (rec.phase !== 'attached') interrupted.push(rec);
      else if (rec.interfaces.some((i) => i.adding || i.removing)) unfinished.push(rec);
      const owned = rt.netns.get(rec.ownedNetns);
      if (owned) owned.sandboxId = rec.id;
    }
    // Addresses go on after the newest sandbox's (or where the last shutdown left them).
    const newest = sandboxState.records.filter((r) => r.interfaces.some(isBuiltIn)).reduce<SandboxRecord | undefined>((a, r) => (!a || r.createdAt > a.createdAt ? r : a), undefined);
    resumeAllocation(rt.store.dir, rt.ipam, newest && { createdAt: newest.createdAt, addresses: newest.interfaces.filter(isBuiltIn).flatMap((i) => i.addresses) });
    for (const rec of interrupted) {
      const what = rec.phase === 'detaching' ? 'a detach' : 'an attach';
      log('warn', `rolling back ${what} interrupted by a restart`, { sandbox: rec.id });
      await rt.release(rec, rec.phase === 'detaching').catch((e) => log('error', `cannot roll back ${what}; reconcile retries`, { sandbox: rec.id, error: (e as Error).message }));
    }
    for (const rec of unfinished) {
      for (const itf of rec.interfaces.filter((i) => i.adding || i.removing)) {
        log('warn', `finishing ${itf.adding ? 'an interface add' : 'an interface removal'} interrupted by a restart: removing it`, { sandbox: rec.id, interface: itf.name, network: itf.network });
        await rt.removeInterface(rec, itf).catch((e) => log('error', 'cannot remove the interface; reconcile retries', { sandbox: rec.id, interface: itf.name, error: (e as Error).message }));
      }
    }
    if (problems.length) log('error', 'state records unreadable: set aside; rebuilding what the kernel still has', { problems });
  rebuildFromKernel(rt);
  choosePodLink(rt);
}

/**
 * podLink "auto" is routed on a node without pods on the bridge, and the bridge on one that has
 * some (kni upgraded in place): a bridged pod takes the whole range as on its link and asks
 * ARP/NDP for a routed pod's address on the bridge, where no one answers, so the two kinds do
 * not reach each other on one node. Both kinds keep working otherwise. A podLink set against
 * the pods already there is obeyed, with a warning; recreating them (draining the node) ends it.
 */
function choosePodLink(rt: RestoreParts): void {
  const itfs = [...rt.sandboxes.values()].flatMap((r) => r.interfaces.filter(isBuiltIn));
  const bridged = itfs.filter((i) => !i.routed);
  rt.podLink = rt.cfg.podLink !== 'auto' ? rt.cfg.podLink : bridged.length ? 'bridge' : 'routed';
  const other = rt.podLink === 'routed' ? bridged : itfs.filter((i) => i.routed);
  log('info', `new pods are wired ${rt.podLink === 'routed' ? 'routed' : 'on the bridge'}`, { podLink: rt.cfg.podLink, ...(rt.cfg.podLink === 'auto' && bridged.length ? { reason: `${bridged.length} pod interface(s) on the bridge already` } : {}) });
  warnWithoutBridgeNetfilter(rt);
  rt.node.warn('pod-link-mixed', other.length ? `${other.length} pod interface(s) were wired ${rt.podLink === 'routed' ? 'on the bridge' : 'routed'} before podLink became "${rt.cfg.podLink}": on this node they cannot reach pods wired from now on until they are recreated (drain the node)` : undefined, { podLink: rt.cfg.podLink, interfaces: other.map((i) => i.hostVeth) });
}

/**
 * Pods on one bridge answer each other over the bridge, below the node's iptables: a Service
 * between two of them is DNATed on the way out, but its answer skips the reverse NAT unless
 * bridged traffic is passed to iptables (br_netfilter, bridge-nf-call-iptables=1, which kubeadm
 * checks for); kni's NetworkPolicy table (on the forward hook) sees it only then too. Routed pods
 * always go through the node's routing and need none of it.
 */
function warnWithoutBridgeNetfilter(rt: RestoreParts): void {
  for (const [family, key] of [[4, 'bridge-nf-call-iptables'], [6, 'bridge-nf-call-ip6tables']] as const) {
    let value = 'missing (br_netfilter not loaded)';
    try {
      value = fs.readFileSync(`/proc/sys/net/bridge/${key}`, 'utf8').trim();
    } catch {
      // no br_netfilter
    }
    const off = rt.podLink === 'bridge' && rt.cfg.ranges.some((c) => c.family === family) && value !== '1';
    rt.node.warn(key, off ? `pods are wired on the bridge but net.bridge.${key} is ${value}: a Service between two pods of this node gets no answer and NetworkPolicy does not judge what passes between them; load br_netfilter and set it to 1, or wire pods routed (podLink routed)` : undefined, { sysctl: `net.bridge.${key}` });
  }
}
