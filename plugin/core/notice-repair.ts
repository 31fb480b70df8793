// A pod's host veth deleted or set down, or a routed pod's route deleted, by someone else,
// noticed as the kernel tells it (plugin/node/kernel-notices.ts): reconcile runs at once, not at
// the next sweep (reconcileSeconds), and wires the pod again with its addresses, or releases it
// when its netns went too (a runtime that removed it without a DEL). A link set down loses the
// routes through it (IPv4 says nothing of them), and setting it up again does not bring them
// back: the pod stays cut off until its interface is wired again. Only a host end that is still
// wrong when looked at starts a reconcile: kni's own deletions belong to no attached record by
// the time their notice is read, and a stale veth kni deleted to make that name again is back, up
// and routed. The bridge (kni0) deleted or set down starts one too, which makes it again and
// wires again the pods whose ports it took: kni deletes it itself only when it leaves the node,
// after it stopped reading the notices, and when its pod ranges change, making it again at once.
// repairOnNotice: false (a live setting) leaves it all to the sweep, to look at a broken pod with
// knictl.
import { log } from './log';
import type { NodeLifecycle } from './node-lifecycle';
import { reconcileAfterRunning, ReconcileParts } from './recovery';
import type { KernelNotices } from '../node/kernel-notices';
import { isBuiltIn } from './network-backend';
import { hostProblems } from './sandbox-check';
import { InterfaceRecord } from '../store/records';

/** What repair on the kernel's notices uses of the runtime. */
export interface RepairParts extends ReconcileParts {
  readonly notices: Pick<KernelNotices, 'onNotices'>;
  readonly node: ReconcileParts['node'] & Pick<NodeLifecycle, 'bridgeState'>;
}

/** Notices within this long share one reconcile. */
const GATHER_MS = 100;

export function repairOnNotices(rt: RepairParts): void {
  let soon: NodeJS.Timeout | undefined;
  const noticed = new Set<string>();
  let lost = false;
  let bridgeNoticed = false;
  // Attached records' built-in interfaces by host end and by address, made once for a batch of
  // notices (a detach's veth delete gives three: the link going down, then gone, and its IPv6
  // route; with pods churning, a batch holds hundreds): no kernel call for a notice of no pod's.
  const attachedInterfaces = (): Map<string, InterfaceRecord> => {
    const byKey = new Map<string, InterfaceRecord>();
    for (const r of rt.sandboxes.values()) {
      if (r.phase !== 'attached') continue;
      for (const i of r.interfaces) {
        if (!isBuiltIn(i)) continue;
        byKey.set(i.hostVeth, i);
        if (i.routed) for (const a of i.addresses) byKey.set(a.address, i);
      }
    }
    return byKey;
  };
  rt.notices.onNotices((n) => {
    if (!rt.cfg.repairOnNotice) return;
    const hosts = n.routesDeleted.flatMap((r) => (r.host ? [r.host] : []));
    if (n.linksDeleted.length || n.linksDown.length || hosts.length) {
      const attached = attachedInterfaces();
      for (const key of [...n.linksDeleted, ...n.linksDown, ...hosts]) {
        const itf = attached.get(key);
        if (itf) noticed.add(itf.hostVeth);
      }
    }
    lost ||= n.lost;
    const bridge = rt.cfg.bridge;
    if (!rt.cni && (n.linksDeleted.includes(bridge) || n.linksDown.includes(bridge))) bridgeNoticed = true;
    if ((!noticed.size && !lost && !bridgeNoticed) || soon) return;
    soon = setTimeout(() => {
      soon = undefined;
      // Still wrong: a veth of that name made since (a re-attach replacing a stale one kni
      // deleted itself) leaves nothing to repair.
      const attached = attachedInterfaces();
      const broken = [...noticed].flatMap((name) => {
        const itf = attached.get(name);
        return itf ? hostProblems(rt, [itf]) : [];
      });
      if (bridgeNoticed) broken.push(...bridgeProblems(rt));
      bridgeNoticed = false;
      const wasLost = lost;
      noticed.clear();
      lost = false;
      if (!broken.length && !wasLost) return;
      log('info', broken.length ? "the kernel says a pod's host veth, its route or the bridge was deleted or set down: reconciling now" : "the kernel's notices were lost: reconciling now", { problems: broken });
      reconcileAfterRunning(rt).catch((e) => log('error', 'reconcile failed', { error: String(e) }));
    }, GATHER_MS);
    soon.unref();
  });
}

/** The bridge kni set up, if it is gone, replaced or down now (a node not set up yet has none to judge). */
function bridgeProblems(rt: RepairParts): string[] {
  if (!rt.node.bridgeIndex) return [];
  const state = rt.node.bridgeState();
  return state === 'ok' ? [] : [`bridge ${rt.cfg.bridge} is ${state}`];
}
