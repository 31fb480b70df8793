// The Pods of this node, for their networks: the annotation k8s.v1.cni.cncf.io/networks read
// from the API (for entry points that pass no annotations, and for changes after the sandbox
// started: interfaces are added to and removed from running pods to match it), and
// k8s.v1.cni.cncf.io/network-status written back with every interface the pod has.
// Level-triggered: every Pod event, every change of the network definitions and a periodic
// resync compare each pod's annotation with its sandbox's interfaces.
import { isObjectName } from '../core/validate';
import type * as K8s from '@kubernetes/client-node';
import { Config } from '../core/config';
import { log } from '../core/log';
import { carriesDefaultRoute, defaultGateways, definitionOf } from '../core/network-backend';
import type { PodEvent } from '../core/events';
import type { NetworkRuntime } from '../core/network-runtime';
import { isolationProblem } from '../core/network-plan';
import { DEFAULT_NETWORK_ANNOTATION, NETWORK_STATUS_ANNOTATION, NETWORKS_ANNOTATION, networkKey, parseDefaultNetwork, parseNetworkSelections } from '../networks/network-selection';
import { SandboxRecord } from '../store/records';
import { apiError, isNotFound, KubeApi, withTimeout } from './kube-api';
import { recordEvent } from './kube-events';
import { WatchRestart } from './watch-restart';

const RESYNC_MS = 30_000;

/**
 * network-status as the multi-net spec has it: one entry per interface, the default network's
 * first; gateway lists the gateways of the pod's default routes through that interface (as
 * Multus takes them from the default routes of each attachment's result).
 */
export function networkStatus(rt: NetworkRuntime, rec: SandboxRecord): Record<string, unknown>[] {
  return rec.interfaces.filter((i) => !i.adding && !i.removing).map((i) => {
    const gateway = defaultGateways(rec, i);
    return {
      name: definitionOf(i) || rt.defaultBackend.name,
      interface: i.name,
      ips: i.addresses.map((a) => a.address),
      mac: i.mac,
      ...(i.mtu ? { mtu: i.mtu } : {}),
      ...(carriesDefaultRoute(i) ? { default: true } : {}),
      dns: i.dns ?? {},
      ...(gateway.length ? { gateway } : {}),
      ...(i.deviceInfo ? { 'device-info': i.deviceInfo } : {}),
    };
  });
}

export class PodNetworks {
  private informer?: K8s.ListWatch<K8s.V1Pod>;
  private restart?: WatchRestart;
  private resyncTimer?: NodeJS.Timeout;
  private stopped = false;
  /** Pod key → the network-status last written (or found) on it. */
  private written = new Map<string, string>();
  /** Pod key → the last failure reported as an Event (one Event per distinct failure). */
  private reported = new Map<string, string>();
  private running = new Map<string, Promise<void>>();
  private again = new Set<string>();
  private unsubscribe?: () => void;

  constructor(private readonly rt: NetworkRuntime, private readonly cfg: Config, private readonly api: KubeApi) {}

  start(): void {
    const { k8s, kc, core } = this.api;
    const fieldSelector = `spec.nodeName=${this.cfg.kubernetes.nodeName}`;
    // resourceVersion "0", as the kubelet lists its pods: the API server's watch cache answers
    // from its index by node. Read from etcd, each kni's list would read every pod of the
    // cluster and filter them, and a DaemonSet rollout makes every kni list at once.
    const list = () => core.listPodForAllNamespaces({ fieldSelector, resourceVersion: '0' });
    this.informer = new k8s.ListWatch<K8s.V1Pod>('/api/v1/pods', new k8s.Watch(kc), list, false, undefined, fieldSelector);
    this.informer.on('add', (p) => this.schedule(p));
    this.informer.on('update', (p) => this.schedule(p));
    this.informer.on('delete', (p) => {
      this.written.delete(keyOf(p));
      this.reported.delete(keyOf(p));
    });
    this.restart = new WatchRestart(this.informer, { resource: 'pod', what: 'Pod watch' });
    this.restart.begin();
    this.rt.podAnnotations = (namespace, name) => this.informer?.get(name, namespace)?.metadata?.annotations;
    this.rt.networks.onChange(() => this.resyncAll());
    this.unsubscribe = this.rt.events.subscribe((e) => {
      if (e.type === 'attached' || e.type === 'interface_added' || e.type === 'interface_removed' || e.type === 'address_changed') {
        const rec = this.rt.sandboxes.get(e.sandboxId);
        // A CRI client's own names (capitals, …) name no Pod: nothing to write.
        if (rec?.phase === 'attached' && isObjectName(rec.pod.name) && isObjectName(rec.pod.namespace || 'default')) this.scheduleKey(`${rec.pod.namespace}/${rec.pod.name}`);
      }
      if (e.type === 'repaired' || e.type === 'released') this.tellPod(e);
    });
    this.resyncTimer = setInterval(() => this.resyncAll(), RESYNC_MS);
    this.resyncTimer.unref();
  }

  stop(): void {
    this.stopped = true;
    this.restart?.stop();
    if (this.resyncTimer) clearInterval(this.resyncTimer);
    this.unsubscribe?.();
    this.rt.podAnnotations = undefined;
  }

  /** The uid of a Pod on this node, as the watch has it (undefined: not there, or not listed yet). */
  podUid(namespace: string, name: string): string | undefined {
    return this.informer?.get(name, namespace)?.metadata?.uid;
  }

  private resyncAll(): void {
    for (const p of this.informer?.list() ?? []) this.schedule(p);
  }

  private schedule(p: K8s.V1Pod): void {
    this.scheduleKey(keyOf(p));
  }

  /** One sync per pod at a time; an event meanwhile runs it once more after. */
  private scheduleKey(key: string): void {
    if (this.stopped) return;
    if (this.running.has(key)) {
      this.again.add(key);
      return;
    }
    const run = this.sync(key)
      .catch((e) => log('error', 'pod network sync failed', { pod: key, error: (e as Error).message }))
      .finally(() => {
        this.running.delete(key);
        if (this.again.delete(key)) this.scheduleKey(key);
      });
    this.running.set(key, run);
  }

  /** The pod's attached sandbox here (the newest, should a dead one linger). */
  private sandboxOf(namespace: string, name: string, uid?: string): SandboxRecord | undefined {
    return this.rt.list()
      .filter((r) => r.pod.namespace === namespace && r.pod.name === name && (!uid || !r.pod.uid || r.pod.uid === uid))
      .sort((a, b) => (a.createdAt < b.createdAt ? 1 : -1))[0];
  }

  private async sync(key: string): Promise<void> {
    const [namespace, name] = key.split('/');
    const pod = this.informer?.get(name, namespace);
    const rec = this.sandboxOf(namespace, name, pod?.metadata?.uid);
    if (!rec) return;
    if (pod) await this.matchAnnotation(pod, rec);
    if (this.cfg.networks.podStatus) await this.writeStatus(namespace, name, pod, this.rt.sandboxes.get(rec.id) ?? rec);
  }

  /** Adds and removes the annotation's networks so the sandbox matches the Pod as it is now. */
  private async matchAnnotation(pod: K8s.V1Pod, rec: SandboxRecord): Promise<void> {
    const key = keyOf(pod);
    const defaultIf = rec.interfaces.find((i) => !i.network)?.name ?? 'eth0';
    let wanted;
    try {
      // Counted after the networks every pod got at attach (networks.everyPod), as attach counted them.
      const everyPod = rec.interfaces.filter((i) => i.selectedBy === 'config').map((i) => ({ interface: i.name }));
      wanted = parseNetworkSelections(pod.metadata?.annotations?.[NETWORKS_ANNOTATION], pod.metadata?.namespace ?? 'default', defaultIf, NETWORKS_ANNOTATION, everyPod);
    } catch (e) {
      return this.report(pod, 'InvalidNetworks', (e as Error).message);
    }
    // A pod's default network is chosen once, at attach: a Pod asking for another one now (edited,
    // or its annotation unknown at attach) is told so, never re-wired under its running containers.
    let chosen;
    try {
      chosen = parseDefaultNetwork(pod.metadata?.annotations?.[DEFAULT_NETWORK_ANNOTATION], defaultIf);
    } catch (e) {
      return this.report(pod, 'InvalidNetworks', (e as Error).message);
    }
    const wired = rec.interfaces.find((i) => !i.network)?.defaultNetwork;
    const defaultProblem = (chosen ? networkKey(chosen) : undefined) === wired ? '' : `the pod asks for ${chosen ? `default network ${networkKey(chosen)}` : "the node's default network"}, but its sandbox was wired with ${wired ?? "the node's default network"}: a pod's default network is chosen when its sandbox is made (recreate the pod to change it)`;
    const refused = isolationProblem(this.cfg.networks, pod.metadata?.namespace ?? 'default', wanted);
    if (refused) return this.report(pod, 'InvalidNetworks', refused);
    const has = (s: { namespace: string; name: string; interface: string }) => rec.interfaces.some((i) => i.network === networkKey(s) && i.name === s.interface);
    const stale = rec.interfaces.filter((i) => i.selectedBy === 'annotation' && !i.adding && !wanted.some((s) => networkKey(s) === i.network && s.interface === i.name));
    const failures: string[] = [];
    for (const itf of stale) {
      try {
        await this.rt.detachNetwork(rec.id, itf.name);
      } catch (e) {
        failures.push(`removing ${itf.network} (${itf.name}): ${(e as Error).message}`);
      }
    }
    for (const s of wanted.filter((w) => !has(w))) {
      if (rec.interfaces.some((i) => i.name === s.interface && i.selectedBy !== 'annotation')) {
        failures.push(`interface ${s.interface} is taken by a network ${rec.interfaces.find((i) => i.name === s.interface)?.selectedBy === 'config' ? 'every pod gets (networks.everyPod)' : "attached through kni's API"}`);
        continue;
      }
      try {
        await this.rt.attachNetwork(rec.id, { ...s, network: networkKey(s) }, 'annotation');
      } catch (e) {
        failures.push(`adding ${networkKey(s)} as ${s.interface}: ${(e as Error).message}`);
      }
    }
    if (failures.length) return this.report(pod, 'NetworkAttachFailed', [defaultProblem, ...failures].filter(Boolean).join('; '));
    if (defaultProblem) return this.report(pod, 'DefaultNetworkNotApplied', defaultProblem);
    this.reported.delete(key);
  }

  /**
   * What reconcile did to a pod's network, as a Warning Event on the Pod (kubectl describe pod):
   * re-wired after something changed it behind kni's back (its connections may have dropped), or
   * released (its netns gone). Only for a Pod this node still has, of the same uid.
   */
  private tellPod(e: PodEvent): void {
    const pod = e.pod.name ? this.informer?.get(e.pod.name, e.pod.namespace) : undefined;
    if (!pod || (e.pod.uid && pod.metadata?.uid !== e.pod.uid)) return;
    const [reason, message] = e.type === 'repaired'
      ? ['NetworkRepaired', `kni found this pod's network changed behind its back (${e.message}) and wired it again with the same addresses`]
      : ['NetworkReleased', `kni released this pod's network (sandbox ${e.sandboxId}): ${e.message}`];
    void recordEvent(this.api, { kind: 'Pod', name: e.pod.name, namespace: e.pod.namespace, uid: pod.metadata?.uid }, 'Warning', reason, message);
  }

  private async report(pod: K8s.V1Pod, reason: string, message: string): Promise<void> {
    const key = keyOf(pod);
    if (this.reported.get(key) === message) return;
    this.reported.set(key, message);
    log('warn', 'pod networks do not match its annotation', { pod: key, reason, error: message });
    await recordEvent(this.api, { kind: 'Pod', name: pod.metadata?.name ?? '', namespace: pod.metadata?.namespace, uid: pod.metadata?.uid }, 'Warning', reason, message);
  }

  private async writeStatus(namespace: string, name: string, pod: K8s.V1Pod | undefined, rec: SandboxRecord): Promise<void> {
    const key = `${namespace}/${name}`;
    const value = JSON.stringify(networkStatus(this.rt, rec), null, 1);
    const current = pod?.metadata?.annotations?.[NETWORK_STATUS_ANNOTATION];
    if (current === value || (!pod && this.written.get(key) === value)) return;
    try {
      const body = { metadata: { annotations: { [NETWORK_STATUS_ANNOTATION]: value } } };
      await withTimeout(this.api.core.patchNamespacedPod({ name, namespace, body }, this.api.k8s.setHeaderOptions('Content-Type', this.api.k8s.PatchStrategy.MergePatch)), 10_000, 'patch Pod');
      this.written.set(key, value);
    } catch (e) {
      if (isNotFound(e)) return; // gone meanwhile
      log('warn', 'cannot write network-status on the Pod; the next resync retries', { pod: key, error: apiError(e) });
    }
  }
}

const keyOf = (p: K8s.V1Pod): string => `${p.metadata?.namespace}/${p.metadata?.name}`;
