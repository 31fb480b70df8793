// Start-up: the records of the state dir brought back — pins that exist, addresses reserved
// again, attaches and detaches a crash interrupted rolled back — then what the kernel still
// holds and no readable record describes rebuilt (recovery.ts).
import { log } from './log';
import type { NetworkRuntime } from './network-runtime';
import { rebuildFromKernel } from './recovery';
import { removePinnedNetns } from '../netns/netns';
import { isNetnsPin } from '../netns/open-netns';
import { SandboxRecord } from '../store/records';
import { isBuiltIn } from './network-backend';

export async function restoreState(rt: NetworkRuntime): Promise<void> {
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
  warnMixedPodLinks(rt);
}

/**
 * After podLink changed: a bridged pod takes the whole range as on its link and asks ARP/NDP
 * for a routed pod's address on the bridge, where no one answers (and a routed pod's reply
 * goes back the same way). Both kinds keep working otherwise; recreating the pods (draining
 * the node) ends it.
 */
function warnMixedPodLinks(rt: NetworkRuntime): void {
  const routed = rt.cfg.podLink === 'routed';
  const other = [...rt.sandboxes.values()].flatMap((r) => r.interfaces.filter((i) => isBuiltIn(i) && !!i.routed !== routed));
  if (other.length) {
    log('warn', `${other.length} pod interface(s) were wired ${routed ? 'on the bridge' : 'routed'} before podLink became "${rt.cfg.podLink}": on this node they cannot reach pods wired from now on until they are recreated (drain the node)`, { podLink: rt.cfg.podLink, interfaces: other.map((i) => i.hostVeth) });
  }
}
