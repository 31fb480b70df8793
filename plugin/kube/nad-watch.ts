// NetworkAttachmentDefinitions (k8s.cni.cncf.io/v1, installed with kni's manifests) from the
// API server into kni's network definitions. Each is parsed when it arrives; one whose
// spec.config does not parse gets a Warning Event (once per version of the object) and a log
// line, and pods asking for it fail with that reason until it is fixed. Its
// k8s.v1.cni.cncf.io/resourceName annotation names the device pool its attachments draw from.
import type * as K8s from '@kubernetes/client-node';
import { log } from '../core/log';
import type { NetworkRuntime } from '../core/network-runtime';
import { parseDefinition, RESOURCE_NAME_ANNOTATION, resourceNameProblem } from '../networks/network-definitions';
import { KubeApi } from './kube-api';
import { recordEvent } from './kube-events';
import { WatchRestart } from './watch-restart';

export const NAD_GROUP = 'k8s.cni.cncf.io';
export const NAD_VERSION = 'v1';
export const NAD_PLURAL = 'network-attachment-definitions';

interface Nad extends K8s.KubernetesObject {
  spec?: { config?: unknown };
}

export class NadWatch {
  private informer?: K8s.Informer<Nad> & K8s.ObjectCache<Nad>;
  private restart?: WatchRestart;
  private reported = new Set<string>();
  private synced = false;

  /** Listed at least once: a definition not known now is not defined. */
  get isSynced(): boolean {
    return this.synced;
  }

  /** onSynced: after each full list (the definitions are then all known). */
  constructor(private readonly rt: NetworkRuntime, private readonly api: KubeApi, private readonly onSynced = () => {}) {}

  start(): void {
    const { k8s, kc } = this.api;
    const custom = kc.makeApiClient(k8s.CustomObjectsApi);
    // From the watch cache (resourceVersion "0"), as Multus's informers list: every kni lists them.
    const list = () => custom.listClusterCustomObject({ group: NAD_GROUP, version: NAD_VERSION, plural: NAD_PLURAL, resourceVersion: '0' }) as Promise<K8s.KubernetesListObject<Nad>>;
    this.informer = k8s.makeInformer<Nad>(kc, `/apis/${NAD_GROUP}/${NAD_VERSION}/${NAD_PLURAL}`, list);
    this.informer.on('add', (o) => this.upsert(o));
    this.informer.on('update', (o) => this.upsert(o));
    this.informer.on('delete', (o) => this.rt.networks.delete('api', `${o.metadata?.namespace}/${o.metadata?.name}`));
    this.restart = new WatchRestart(this.informer, {
      resource: 'network-attachment-definition',
      what: 'NetworkAttachmentDefinition watch',
      describe: (err) => (err.includes('404') ? 'NetworkAttachmentDefinitions cannot be listed: is their CRD installed (kind-config/kni-daemonset.yaml has it)? retrying' : 'NetworkAttachmentDefinition watch broke; starting it again'),
      onConnected: () => this.resync(),
    });
    this.restart.begin();
  }

  stop(): void {
    this.restart?.stop();
  }

  /** Once listed and watching: the cache is the truth, definitions deleted meanwhile go. */
  private resync(): void {
    const objs = this.informer?.list() ?? [];
    this.rt.networks.replace('api', objs.map((o) => this.parse(o)));
    if (!this.synced) log('info', 'NetworkAttachmentDefinitions listed', { count: objs.length });
    this.synced = true;
    this.onSynced();
  }

  private parse(o: Nad) {
    const namespace = o.metadata?.namespace ?? 'default';
    const name = o.metadata?.name ?? '';
    const config = o.spec?.config;
    const def = parseDefinition(namespace, name, 'api', `uid ${o.metadata?.uid ?? ''} resourceVersion ${o.metadata?.resourceVersion ?? ''}`, typeof config === 'string' ? config : '', this.rt.networks.ipamDataDir);
    if (config !== undefined && typeof config !== 'string') def.error = 'spec.config must be a string holding a CNI config (JSON)';
    const resource = o.metadata?.annotations?.[RESOURCE_NAME_ANNOTATION];
    if (resource !== undefined) {
      const problem = resourceNameProblem(resource);
      if (problem) {
        def.error ??= problem;
        delete def.config;
      } else def.resourceName = resource;
    }
    return def;
  }

  private upsert(o: Nad): void {
    const def = this.parse(o);
    this.rt.networks.set(def);
    const version = `${o.metadata?.uid}/${o.metadata?.resourceVersion}`;
    if (def.error && !this.reported.has(version)) {
      this.reported.add(version);
      log('warn', 'NetworkAttachmentDefinition is invalid: pods asking for it fail until it is fixed', { network: `${def.namespace}/${def.name}`, error: def.error });
      // One node reports it (the first by name would need a list): each kni names itself as the reporting instance.
      void recordEvent(this.api, { kind: 'NetworkAttachmentDefinition', apiVersion: `${NAD_GROUP}/${NAD_VERSION}`, name: def.name, namespace: def.namespace, uid: o.metadata?.uid }, 'Warning', 'InvalidConfig', def.error);
    }
  }
}
