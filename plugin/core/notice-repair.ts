// A pod's host veth deleted by someone else, noticed as the kernel tells it (plugin/node/
// kernel-notices.ts): reconcile runs at once, not at the next sweep (reconcileSeconds), and
// wires the pod again with its addresses, or releases it when its netns went too (a runtime
// that removed it without a DEL). kni's own deletions do not start one: a detach's veth belongs
// to no attached record by the time its notice is read, and a stale veth kni deleted to make
// that name again is back when it is looked for. The bridge is left to the sweep: kni deletes
// it itself when it leaves the node, and must not make it again then. repairOnNotice: false (a
// live setting) leaves it all to the sweep, to look at a broken pod with knictl.
import { log } from './log';
import type { NetworkRuntime } from './network-runtime';
import { isBuiltIn } from './network-backend';
import { linkByName } from '../netlink/link';
import { reconcileAfterRunning } from './recovery';

/** Notices within this long share one reconcile. */
const GATHER_MS = 100;

export function repairOnNotices(rt: NetworkRuntime): void {
  let soon: NodeJS.Timeout | undefined;
  const noticed = new Set<string>();
  let lost = false;
  const attachedVeth = (name: string): boolean => [...rt.sandboxes.values()].some((r) => r.phase === 'attached' && r.interfaces.some((i) => isBuiltIn(i) && i.hostVeth === name));
  rt.notices.onNotices((n) => {
    if (!rt.cfg.repairOnNotice) return;
    for (const name of n.linksDeleted) if (attachedVeth(name)) noticed.add(name);
    lost ||= n.lost;
    if ((!noticed.size && !lost) || soon) return;
    soon = setTimeout(() => {
      soon = undefined;
      // Still missing: a veth of that name made since (a re-attach replacing a stale one kni
      // deleted itself) leaves nothing to repair.
      const missing = [...noticed].filter((name) => attachedVeth(name) && !linkByName(rt.host, name));
      const wasLost = lost;
      noticed.clear();
      lost = false;
      if (!missing.length && !wasLost) return;
      log('info', missing.length ? "the kernel says a pod's host veth was deleted: reconciling now" : "the kernel's notices were lost: reconciling now", { links: missing });
      reconcileAfterRunning(rt).catch((e) => log('error', 'reconcile failed', { error: String(e) }));
    }, GATHER_MS);
    soon.unref();
  });
}
