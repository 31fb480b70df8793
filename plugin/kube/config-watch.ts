// kni's ConfigMap, watched: an edit that changes only what may change under running pods is
// applied at once; anything else (a setting that needs a restart, or an invalid file) is
// refused — kni keeps its config, logs every problem and records an Event on the ConfigMap.
// Deleted, it keeps its config too and says so (the DaemonSet mounts it: a restart needs it).
import type * as K8s from '@kubernetes/client-node';
import { Config, ConfigError, ConfigText, configText, parseConfigText } from '../core/config';
import { log, setLogLevel } from '../core/log';
import { NetworkRuntime } from '../core/network-runtime';
import { configChangesTotal } from '../observe/metrics';
import { KubeApi } from './kube-api';
import { recordEvent } from './kube-events';
import { WatchRestart } from './watch-restart';

/** Settings applied live; every other one needs a restart of kni. */
export const LIVE_SETTINGS = ['logLevel', 'reconcileSeconds', 'unclaimedNetnsGraceSeconds', 'netnsPoolSize', 'runtimeHandlers', 'vmTap', 'masquerade', 'nonMasqueradeCIDRs', 'allowPodForwarding', 'repairOnNotice', 'backend', 'vxlan', 'peerProbe', 'extensions', 'sourceCheck', 'reservedHostPorts'] as const;

// CIDRs compared as their text; ranges taken from the Node are not the file's.
const comparable = (c: Config): ConfigText => ({ ...configText(c), ranges: c.rangesFromNode ? [] : c.ranges.map((r) => r.text) });

/** The top-level settings that differ, split into those applied live and those that are not. */
export function diffConfig(current: Config, next: Config): { live: string[]; fixed: string[] } {
  const a = comparable(current) as unknown as Record<string, unknown>;
  const b = comparable(next) as unknown as Record<string, unknown>;
  const changed = Object.keys(b).filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]));
  const live = new Set<string>(LIVE_SETTINGS);
  return { live: changed.filter((k) => live.has(k)), fixed: changed.filter((k) => !live.has(k)) };
}

export interface LiveHooks {
  /** The log level of the command line, used when the file sets none. */
  flagLogLevel: string;
  /** The backend, vxlan or peerProbe changed: routes again, and the probe with its new settings. */
  resyncRoutes(): void;
}

export class ConfigWatch {
  private restart?: WatchRestart;
  private lastSeen = '';
  readonly namespace: string;
  readonly name: string;

  constructor(private readonly rt: NetworkRuntime, private readonly cfg: Config, private readonly api: KubeApi, private readonly hooks: LiveHooks) {
    [this.namespace, this.name] = cfg.kubernetes.configMap.split('/');
  }

  start(): void {
    const { k8s, kc, core } = this.api;
    const fieldSelector = `metadata.name=${this.name}`;
    const informer = new k8s.ListWatch<K8s.V1ConfigMap>(`/api/v1/namespaces/${this.namespace}/configmaps`, new k8s.Watch(kc), () => core.listNamespacedConfigMap({ namespace: this.namespace, fieldSelector, resourceVersion: '0' }), false, undefined, fieldSelector);
    informer.on('add', (cm) => void this.changed(cm));
    informer.on('update', (cm) => void this.changed(cm));
    informer.on('delete', () => log('warn', 'ConfigMap deleted: kni keeps the config it runs with, but its pods cannot start again until the ConfigMap is back', { configMap: this.cfg.kubernetes.configMap }));
    this.restart = new WatchRestart(informer, { resource: 'configmap', what: 'ConfigMap watch', fields: { configMap: this.cfg.kubernetes.configMap } });
    this.restart.begin();
  }

  stop(): void {
    this.restart?.stop();
  }

  private async changed(cm: K8s.V1ConfigMap): Promise<void> {
    const key = this.cfg.kubernetes.configKey;
    const text = cm.data?.[key];
    if (text === this.lastSeen) return;
    this.lastSeen = text ?? '';
    const source = `ConfigMap ${this.namespace}/${this.name} key ${key}`;
    if (text === undefined) return this.refuse(cm, [`${source} is missing`]);
    let next: Config;
    try {
      next = parseConfigText(text, source);
    } catch (e) {
      const msg = (e as Error).message;
      return this.refuse(cm, e instanceof ConfigError ? msg.replace(`${source}: `, '').split('; ') : [msg]);
    }
    const { live, fixed } = diffConfig(this.cfg, next);
    if (fixed.length) {
      return this.refuse(cm, fixed.map((k) => `${k} cannot change while kni runs (restart kni's pod on each node to apply it)`));
    }
    if (!live.length) return;
    await this.apply(next, live);
    configChangesTotal.inc({ result: 'applied' });
    log('info', 'config changed live', { configMap: this.cfg.kubernetes.configMap, settings: live });
    void recordEvent(this.api, { kind: 'ConfigMap', name: this.name, namespace: this.namespace, uid: cm.metadata?.uid }, 'Normal', 'ConfigApplied', `kni on ${this.cfg.kubernetes.nodeName}: applied ${live.join(', ')}`);
  }

  private async apply(next: Config, settings: string[]): Promise<void> {
    const c = this.cfg;
    for (const k of settings) {
      switch (k) {
        case 'logLevel':
          c.logLevel = next.logLevel;
          setLogLevel(next.logLevel || this.hooks.flagLogLevel);
          break;
        case 'reconcileSeconds':
          c.reconcileSeconds = next.reconcileSeconds;
          this.rt.restartSweeper();
          break;
        case 'masquerade':
        case 'nonMasqueradeCIDRs':
          c.masquerade = next.masquerade;
          c.nonMasqueradeCIDRs = next.nonMasqueradeCIDRs;
          await this.rt.node.applyMasquerade().catch((e) => log('error', 'cannot apply masquerade', { error: (e as Error).message }));
          break;
        case 'allowPodForwarding':
          c.allowPodForwarding = next.allowPodForwarding;
          await this.rt.node.applyForwarding().catch((e) => log('error', 'cannot apply allowPodForwarding', { error: (e as Error).message }));
          break;
        case 'extensions':
          c.extensions = next.extensions;
          this.rt.extensions.setRequired(next.extensions.required);
          break;
        case 'backend':
        case 'vxlan':
        case 'peerProbe': {
          const portChanged = c.peerProbe.port !== next.peerProbe.port;
          c.backend = next.backend;
          c.vxlan = next.vxlan;
          c.peerProbe = next.peerProbe;
          if (portChanged && this.rt.node.isSetUp) await this.rt.node.writeGuards().catch((e) => log('error', "cannot guard the probe's new port", { error: (e as Error).message }));
          this.hooks.resyncRoutes();
          break;
        }
        default:
          (c as unknown as Record<string, unknown>)[k] = (next as unknown as Record<string, unknown>)[k];
      }
    }
  }

  private refuse(cm: K8s.V1ConfigMap, problems: string[]): void {
    configChangesTotal.inc({ result: 'refused' });
    log('error', 'config change refused: kni keeps its current config', { configMap: this.cfg.kubernetes.configMap, problems });
    void recordEvent(this.api, { kind: 'ConfigMap', name: this.name, namespace: this.namespace, uid: cm.metadata?.uid }, 'Warning', 'ConfigRefused', `kni on ${this.cfg.kubernetes.nodeName} keeps its current config: ${problems.join('; ')}`);
  }
}
