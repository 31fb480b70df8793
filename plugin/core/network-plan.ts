// Which interfaces a sandbox gets, and through which backend: the default network first (eth0,
// kni's built-in network or defaultNetwork.cni), then one per network the pod selects
// (k8s.v1.cni.cncf.io/networks), each resolved to its definition here. A selection of a network
// kni does not know, or whose definition does not parse, fails the attach with that reason.
import { KniError, invalid } from './errors';
import { log } from './log';
import type { Config } from './config';
import type { CniResultCache } from '../cni/cni-result-cache';
import type { NetworkDefinitions } from '../networks/network-definitions';
import { AttachmentRequest, definitionOf, isBuiltIn, NetworkBackend } from './network-backend';
import { blankInterface, PlannedInterface } from './attach-pipeline';
import { CniBackend } from './cni-backend';
import * as validate from './validate';
import { CniNetwork } from '../cni/cni-network';
import { parseIp } from '../ipam/ip';
import { DEFAULT_NETWORK_ANNOTATION, NetworkSelection, NETWORKS_ANNOTATION, networkKey, parseDefaultNetwork, parseEveryPod, parseNetworkSelections, SelectionError } from '../networks/network-selection';
import { InterfaceRecord, SandboxRecord, SelectedBy } from '../store/records';

/** What planning a pod's interfaces uses of the runtime. */
export interface PlanParts {
  readonly cfg: Config;
  readonly defaultBackend: NetworkBackend;
  readonly builtin: NetworkBackend;
  readonly cni?: CniNetwork;
  readonly networks: NetworkDefinitions;
  readonly cniCache: CniResultCache;
  /** A Pod's annotations from the API, for entry points that pass none. */
  podAnnotations?: (namespace: string, name: string) => Record<string, string> | undefined;
  refreshFileNetworks(missing?: string): void;
}

/** A pod annotation as the sandbox carries it, else as its Pod has it (the API). */
export const podAnnotation = (rt: Pick<PlanParts, 'podAnnotations'>, rec: Pick<SandboxRecord, 'pod' | 'annotations'>, key: string): string | undefined =>
  rec.annotations[key] ?? rt.podAnnotations?.(rec.pod.namespace, rec.pod.name)?.[key];

/**
 * The selections a sandbox asks for: its own annotations if they carry the key, else its Pod's
 * (the API). `before`: the networks it gets ahead of them (everyPodSelections).
 */
export function selectionsOf(rt: PlanParts, rec: Pick<SandboxRecord, 'pod' | 'annotations'>, defaultIf: string, before: NetworkSelection[] = []): NetworkSelection[] {
  const text = podAnnotation(rt, rec, NETWORKS_ANNOTATION);
  let selections: NetworkSelection[];
  try {
    selections = parseNetworkSelections(text, rec.pod.namespace || 'default', defaultIf, NETWORKS_ANNOTATION, before);
  } catch (e) {
    if (e instanceof SelectionError) throw invalid(e.message);
    throw e;
  }
  const refused = isolationProblem(rt.cfg.networks, rec.pod.namespace || 'default', selections);
  if (refused) throw invalid(refused);
  return selections;
}

/**
 * The networks every pod of a namespace gets (networks.everyPod, Multus's defaultNetworks),
 * none in networks.systemNamespaces. The operator's choice: namespace isolation does not apply.
 */
export function everyPodSelections(rt: PlanParts, namespace: string, defaultIf: string): NetworkSelection[] {
  const n = rt.cfg.networks;
  if (!n.everyPod.length || n.systemNamespaces.includes(namespace || 'default')) return [];
  try {
    return parseEveryPod(n.everyPod, defaultIf);
  } catch (e) {
    if (e instanceof SelectionError) throw invalid(e.message);
    throw e;
  }
}

/** What is wrong with networks.everyPod now ('' when nothing is): a definition kni does not know, or an invalid one. */
export function everyPodProblem(rt: PlanParts): string {
  const n = rt.cfg.networks;
  const problems = parseEveryPod(n.everyPod).map((s) => {
    const def = rt.networks.get(networkKey(s));
    return !def ? `${networkKey(s)} is not defined` : !def.config ? `${networkKey(s)} is invalid (${def.error})` : '';
  }).filter(Boolean);
  return problems.length ? `networks.everyPod: ${problems.join('; ')}: every new pod outside ${n.systemNamespaces.join(', ') || 'the system namespaces'} fails to start until it is fixed` : '';
}

/**
 * With networks.namespaceIsolation (Multus's), why a pod of `namespace` may not use these
 * selections ('' when it may): only definitions of its own namespace, of `default` and of
 * networks.globalNamespaces. A tenant cannot then put its pods on another tenant's network.
 */
export function isolationProblem(cfg: { namespaceIsolation: boolean; globalNamespaces: string[] }, namespace: string, selections: Pick<NetworkSelection, 'namespace' | 'name'>[], annotation = NETWORKS_ANNOTATION): string {
  if (!cfg.namespaceIsolation) return '';
  const allowed = new Set([namespace, 'default', ...cfg.globalNamespaces]);
  const out = selections.filter((s) => !allowed.has(s.namespace)).map(networkKey);
  return out.length ? `${annotation}: namespace isolation: pods of namespace ${namespace} may use networks of ${[...allowed].join(', ')} only, not ${out.join(', ')}` : '';
}

/** The network a sandbox takes as its default network instead of the node's, if its pod chose one. */
export function chosenDefaultNetwork(rt: PlanParts, rec: Pick<SandboxRecord, 'pod' | 'annotations'>, ifName: string): NetworkSelection | undefined {
  const text = podAnnotation(rt, rec, DEFAULT_NETWORK_ANNOTATION);
  let chosen: NetworkSelection | undefined;
  try {
    chosen = parseDefaultNetwork(text, ifName);
  } catch (e) {
    if (e instanceof SelectionError) throw invalid(e.message);
    throw e;
  }
  // The pod names the namespace (a name alone means kube-system): the same rule as its networks.
  const refused = chosen && isolationProblem(rt.cfg.networks, rec.pod.namespace || 'default', [chosen], DEFAULT_NETWORK_ANNOTATION);
  if (refused) throw invalid(refused);
  return chosen;
}

/**
 * The default interface through the chosen definition's plugins: the runtime's requests (port
 * mappings, bandwidth, a static IP or MAC) go to them as capabilities, a selection's own
 * ips, mac and bandwidth winning, its port mappings added.
 */
function planChosenDefault(rt: PlanParts, sel: NetworkSelection, runtimeReq: AttachmentRequest): PlannedInterface {
  const backend = backendForSelection(rt, sel);
  const at = `default network ${networkKey(sel)}`;
  const mac = sel.mac ?? runtimeReq.mac;
  const bandwidth = sel.bandwidth ? prefixed(at, () => validate.bandwidth(sel.bandwidth, {})) : runtimeReq.bandwidth;
  const req: AttachmentRequest = {
    ips: sel.ips ? sel.ips.map((text) => ({ ...parseIp(text.split('/')[0]), text })) : runtimeReq.ips,
    ...(mac ? { mac } : {}),
    ports: [...runtimeReq.ports, ...prefixed(at, () => validate.portMappings(sel.portMappings))],
    ...(bandwidth ? { bandwidth } : {}),
    ...(sel.cniArgs ? { cniArgs: sel.cniArgs } : {}),
  };
  return withOwnDevice({ backend, itf: blankInterface(sel.interface, { defaultNetwork: networkKey(sel) }), req, ...resourceOf(rt, sel) }, sel);
}

/** The CNI network a selection names, as it is defined now. */
export function backendForSelection(rt: PlanParts, sel: Pick<NetworkSelection, 'namespace' | 'name'>): NetworkBackend {
  const key = networkKey(sel);
  rt.refreshFileNetworks(key);
  const def = rt.networks.get(key);
  if (!def) throw new KniError('NOT_FOUND', `network ${key}: no NetworkAttachmentDefinition (or networks.dir file) of that name`);
  if (!def.config) throw new KniError('FAILED_PRECONDITION', `network ${key}: its definition is invalid: ${def.error}`);
  return new CniBackend(new CniNetwork(def.config, rt.cfg.defaultNetwork, rt.cniCache), key, { deviceInfoDir: rt.cfg.networks.deviceInfoDir, cfg: rt.cfg });
}

/** One selection as a planned interface. */
export function planSelection(rt: PlanParts, sel: NetworkSelection, selectedBy: SelectedBy): PlannedInterface {
  const backend = backendForSelection(rt, sel);
  const at = `network ${networkKey(sel)}`;
  const req: AttachmentRequest = {
    ips: (sel.ips ?? []).map((text) => ({ ...parseIp(text.split('/')[0]), text })),
    ...(sel.mac ? { mac: sel.mac } : {}),
    ports: prefixed(at, () => validate.portMappings(sel.portMappings)),
    ...(sel.bandwidth ? { bandwidth: prefixed(at, () => validate.bandwidth(sel.bandwidth, {})) } : {}),
    ...(sel.cniArgs ? { cniArgs: sel.cniArgs } : {}),
    ...(sel.defaultRoute ? { defaultRoute: sel.defaultRoute } : {}),
  };
  return withOwnDevice({ backend, itf: blankInterface(sel.interface, { network: networkKey(sel), selectedBy }), req, ...resourceOf(rt, sel) }, sel);
}

/**
 * A selection's infiniband-guid and deviceID, for its plugins. As Multus: a device the
 * definition's resourceName gives (device-assignment.ts) wins over one the pod names.
 */
function withOwnDevice(p: PlannedInterface, sel: NetworkSelection): PlannedInterface {
  if (sel.infinibandGuid) p.req.infinibandGuid = sel.infinibandGuid;
  if (!sel.deviceId) return p;
  if (p.resourceName) {
    log('warn', 'a selection\'s deviceID is not used: its network gives a device of its resource', { network: networkKey(sel), interface: sel.interface, deviceID: sel.deviceId, resource: p.resourceName });
    return p;
  }
  p.req.device = { id: sel.deviceId, resource: '' };
  p.itf.deviceId = sel.deviceId;
  return p;
}

/** The device plugin resource a selected definition draws a device from, if it names one. */
function resourceOf(rt: PlanParts, sel: Pick<NetworkSelection, 'namespace' | 'name'>): { resourceName?: string } {
  const resourceName = rt.networks.get(networkKey(sel))?.resourceName;
  return resourceName ? { resourceName } : {};
}

function prefixed<T>(at: string, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (e instanceof KniError) throw new KniError(e.code, `${at}: ${e.message}`);
    throw e;
  }
}

/** Every interface of a new sandbox: the default network's, then networks.everyPod's, then the selections'. */
export function planSandbox(rt: PlanParts, rec: SandboxRecord, ifName: string, defaultReq: AttachmentRequest): PlannedInterface[] {
  const everyPod = everyPodSelections(rt, rec.pod.namespace, ifName);
  const selections = selectionsOf(rt, rec, ifName, everyPod);
  if (selections.filter((s) => s.defaultRoute?.length).length > 1) throw invalid(`${NETWORKS_ANNOTATION}: only one network may take the default route`);
  const chosen = chosenDefaultNetwork(rt, rec, ifName);
  const plan: PlannedInterface[] = [chosen ? planChosenDefault(rt, chosen, defaultReq) : { backend: rt.defaultBackend, itf: blankInterface(ifName), req: defaultReq }];
  for (const s of everyPod) plan.push(planSelection(rt, s, 'config'));
  for (const s of selections) plan.push(planSelection(rt, s, 'annotation'));
  return plan;
}

/**
 * The backend that undoes or checks an interface: the built-in network, the default CNI
 * network, or the config its ADD ran with (cached), else its definition as it is now.
 */
export function backendOfInterface(rt: PlanParts, rec: SandboxRecord, itf: InterfaceRecord): NetworkBackend | undefined {
  if (isBuiltIn(itf)) return rt.builtin;
  const definition = definitionOf(itf);
  const label = definition || rt.defaultBackend.name;
  const ofCached = () => CniNetwork.ofCached(rt.cniCache, itf.cniName ?? '', rec.id, itf.name, rt.cfg.defaultNetwork);
  if (!definition && rt.cni && (!itf.cniName || itf.cniName === rt.cni.name)) {
    if (!rt.cni.reconfigured) return rt.defaultBackend;
    // The default network's file changed since kni read it: a pod's own config undoes it.
    const own = ofCached();
    return own && JSON.stringify(own.list) !== JSON.stringify(rt.cni.list) ? new CniBackend(own, undefined, { cfg: rt.cfg }) : rt.defaultBackend;
  }
  const cached = ofCached();
  if (cached) return new CniBackend(cached, label, { deviceInfoDir: rt.cfg.networks.deviceInfoDir, cfg: rt.cfg });
  if (!definition) return undefined;
  const [namespace, name] = definition.split('/');
  try {
    return backendForSelection(rt, { namespace, name });
  } catch {
    return undefined;
  }
}
