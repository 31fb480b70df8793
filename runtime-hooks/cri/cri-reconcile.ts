// Reconcile with the container runtime over CRI: whatever sandbox kni holds that the runtime
// no longer lists (removed while kni was down, a DEL that never came) is released.
import { log } from '../../plugin/core/log';
import { NetworkRuntime } from '../../plugin/core/network-runtime';
import { loadProto, unaryOnce } from '../../plugin/server/protos';

export async function listCriSandboxes(socket: string, timeoutMs = 10_000): Promise<string[]> {
  const pkg = loadProto('cri/runtime_v1.proto') as any;
  const res = await unaryOnce<{ items: { id: string }[] }>(pkg.runtime.v1.RuntimeService, socket, 'ListPodSandbox', {}, timeoutMs);
  return res.items.map((s) => s.id);
}

export async function reconcileWithCri(rt: NetworkRuntime, socket: string, graceMs: number): Promise<void> {
  let live: string[];
  try {
    live = await listCriSandboxes(socket);
  } catch (e) {
    log('warn', 'cannot list sandboxes over CRI; reconcile skipped', { socket, error: (e as Error).message });
    return;
  }
  const r = await rt.gc(live, graceMs);
  if (r.releasedSandboxes.length || r.releasedNetns.length) {
    log('info', 'reconciled with the runtime: released what it no longer has', { entry: 'cri', sandboxes: r.releasedSandboxes, netns: r.releasedNetns });
  }
}
