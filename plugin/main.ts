#!/usr/bin/env node
// kni-runtime: the network runtime daemon.
import { Command } from 'commander';
import { BUILD, versionText } from './version';
import net from 'node:net';
import path from 'node:path';
import { Config, ConfigError, configText, loadConfig } from './core/config';
import { NriPlugin } from '../runtime-hooks/nri/nri-plugin';
import { log, setLogLevel } from './core/log';
import { socketPathProblem } from './core/validate';
import { NetworkRuntime } from './core/network-runtime';
import { driftFindings, parseMetricsAddr, registerRuntimeGauges, serveMetrics } from './observe/metrics';
import { startTracingFromEnv } from './observe/tracing';
import { clearStaleSocket, serve } from './server/server';
import { lockStateDir, StateDirInUseError } from './store/state-lock';
import { cniInstallDrift, installCni, kniConflist, shadowingConf, uninstallCni } from '../runtime-hooks/cni/cni-install';
import { markRestarting, serveCni } from '../runtime-hooks/cni/cni-server';
import { reconcileWithCri } from '../runtime-hooks/cri/cri-reconcile';
import { podNetworkLifecycleHandlers, podNetworkLifecycleService } from '../runtime-hooks/containerd/pod-network-lifecycle';
import { ConfigWatch } from './kube/config-watch';
import { connectKube, KubeApi } from './kube/kube-api';
import { recordEvent } from './kube/kube-events';
import { kniLeavingNode } from './kube/leaving-node';
import { clearLeaving, leaveNode, leavingMarked, leaveWithoutDaemon, markLeaving, podsHeld } from './core/leave-node';
import { clusterNetworkConf } from './cni/load-network';
import { NodeAgent } from './kube/node-agent';
import { readRangesFile } from './kube/node-ranges';
import { NadWatch } from './kube/nad-watch';
import { everyPodProblem } from './core/network-plan';
import { PodNetworks } from './kube/pod-networks';
import { PolicyWatch } from './kube/policy-watch';
import { nftApply } from './node/iptables';
import { removePolicyTableScript } from './policy/policy-ruleset';
import { podDevices } from './kube/pod-resources';
import { threadsLoaded } from './sys/threads';
import { startMemoryTrim } from './sys/memory-trim';

/**
 * The NRI plugin, when enabled: pre-registered (the runtime started us with the socket on
 * fd 3 and NRI_PLUGIN_* in the environment) or external (we connect to nri.socket).
 */
function nriPlugin(rt: NetworkRuntime, cfg: Config): NriPlugin | undefined {
  const fd = process.env.NRI_PLUGIN_SOCKET;
  if (fd) {
    return new NriPlugin(rt, {
      socket: `fd ${fd}`,
      pluginName: process.env.NRI_PLUGIN_NAME || cfg.nri.pluginName,
      pluginIndex: process.env.NRI_PLUGIN_IDX || cfg.nri.pluginIndex,
      syncGraceSeconds: cfg.nri.syncGraceSeconds,
      connected: new net.Socket({ fd: Number(fd), readable: true, writable: true }),
    });
  }
  return cfg.nri.enabled ? new NriPlugin(rt, cfg.nri) : undefined;
}

/** defaultNetwork.cni "auto": the cluster network's config, waited for (looked for every second) until its agent writes it. */
async function clusterNetwork(cfg: Config): Promise<string> {
  for (let said = false; ; said = true) {
    const found = clusterNetworkConf(cfg.cni.confDir, cfg.cni.confName);
    if (found) {
      log('info', 'defaultNetwork.cni is auto: the cluster network\'s config found', { file: found, kniConfig: kniConflist(cfg.cni) });
      return found;
    }
    if (!said) log('info', 'defaultNetwork.cni is auto: waiting for the cluster network\'s CNI config (the first other config in cni.confDir)', { confDir: cfg.cni.confDir });
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

/**
 * --uninstall-if-leaving: whether the files go (see kube/leaving-node.ts). The preStop has the
 * pod's grace period (10 s in kni's DaemonSet) with kni's shutdown: the API gets 2 s for the
 * decision and 2 s for its Event, and without an answer the files stay.
 */
async function kniLeaving(cfg: Config): Promise<boolean> {
  const namespace = process.env.KNI_POD_NAMESPACE ?? '';
  const name = process.env.KNI_POD_NAME ?? '';
  if (!namespace || !name) throw new ConfigError('--uninstall-if-leaving needs KNI_POD_NAMESPACE and KNI_POD_NAME (the downward API\'s metadata.namespace and metadata.name, as kind-config/kni-daemonset.yaml sets them)');
  try {
    const api = connectKube(cfg.kubernetes.kubeconfig);
    const { leaving, reason, podUid } = await kniLeavingNode(api, namespace, name, 2_000);
    log('info', leaving ? 'kni leaves this node: removing its CNI config and kni-cni' : 'kni\'s CNI config and kni-cni stay', { reason });
    // A preStop's output is seen by no one: its decision goes on the Pod (kubectl get events).
    if (podUid) await recordEvent(api, { kind: 'Pod', name, namespace, uid: podUid }, 'Normal', leaving ? 'CNIConfigRemoved' : 'CNIConfigKept', `${leaving ? 'kni leaves this node: its CNI config and kni-cni removed' : 'kni\'s CNI config and kni-cni stay on this node'}: ${reason}`, 2_000);
    return leaving;
  } catch (e) {
    log('warn', 'cannot tell whether kni leaves this node: its CNI config and kni-cni stay (kni-runtime --uninstall removes them)', { error: (e as Error).message });
    return false;
  }
}

async function main(): Promise<void> {
  // A runtime starting us as a pre-registered NRI plugin passes no PATH: use the system one
  // to find iptables (node setup only).
  process.env.PATH ||= '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
  const program = new Command()
    .name('kni-runtime')
    .description('kni network runtime: serves the KNI API on a unix socket and wires pod networks')
    .option('--socket <path>', 'unix socket to serve on', '/run/kni/kni.sock')
    .option('--state-dir <dir>', 'where sandbox records are kept', '/var/lib/kni')
    .option('--config <file>', 'YAML or JSON config (default: the embedded default network)')
    .option('--log-level <level>', 'debug, info, warn or error', process.env.KNI_LOG_LEVEL ?? 'info')
    .option('--metrics-addr <host:port>', 'serve Prometheus metrics on http://host:port/metrics (off by default)', process.env.KNI_METRICS_ADDR)
    .option('--print-config', 'print the effective config and exit')
    .option('--uninstall', "remove the CNI conflist and kni-cni binary kni installed and, once no pod is left on kni's network, its node network and state (now, or when the running daemon stops), and exit (pods are left alone)")
    .option('--uninstall-if-leaving', "the DaemonSet's preStop: --uninstall only if kni leaves this node (its DaemonSet deleted), not when a new kni pod takes over (KNI_POD_NAMESPACE, KNI_POD_NAME name kni's pod)")
    .version(`kni-runtime ${versionText()}`, '--version', 'print the version and the commit built from, and exit')
    .parse();
  const opts = program.opts<{ socket: string; stateDir: string; config?: string; logLevel: string; metricsAddr?: string; printConfig?: boolean; uninstall?: boolean; uninstallIfLeaving?: boolean }>();
  // A flag's typo fails before anything starts, with its reason and no stack.
  const flagProblem =
    socketPathProblem(opts.socket, '--socket') ||
    (path.isAbsolute(opts.stateDir) ? '' : `--state-dir ${JSON.stringify(opts.stateDir)} must be an absolute path`);
  if (flagProblem) throw new ConfigError(flagProblem);
  try {
    setLogLevel(opts.logLevel);
    if (opts.metricsAddr) parseMetricsAddr(opts.metricsAddr);
  } catch (e) {
    throw new ConfigError((e as Error).message);
  }
  const cfg = loadConfig(opts.config);
  if (cfg.logLevel) setLogLevel(cfg.logLevel);
  if (opts.printConfig) {
    process.stdout.write(`${JSON.stringify({ ...configText(cfg), mtu: cfg.mtu || 'auto' }, null, 2)}\n`);
    return;
  }
  if (opts.uninstallIfLeaving && !(await kniLeaving(cfg))) return;
  if (opts.uninstall || opts.uninstallIfLeaving) {
    // First: a running kni puts back a conflist that goes without it.
    markLeaving(opts.stateDir);
    for (const f of uninstallCni(cfg.cni)) log('info', 'removed', { file: f });
    await leaveWithoutDaemon(cfg, opts.stateDir);
    return;
  }
  if (process.getuid?.() !== 0) throw new Error('kni-runtime must run as root (it creates network namespaces and links)');

  // Before touching anything: a second daemon must not set up (or change) the node network,
  // whichever socket it was given.
  await clearStaleSocket(opts.socket);
  await clearStaleSocket(cfg.cni.socket);
  lockStateDir(opts.stateDir);
  if (clearLeaving(opts.stateDir)) log('info', 'kni is back on this node (it had been uninstalled while running)', { stateDir: opts.stateDir });
  const stopTracing = startTracingFromEnv();
  let api: KubeApi | undefined;
  if (cfg.kubernetes.nodeName) {
    try {
      api = connectKube(cfg.kubernetes.kubeconfig);
    } catch (e) {
      throw new ConfigError(`kubernetes.nodeName is ${cfg.kubernetes.nodeName} but ${(e as Error).message}`);
    }
    // State on disk wins: the ranges this node's pods hold addresses in, even with the API away.
    if (cfg.rangesFromNode) cfg.ranges = readRangesFile(opts.stateDir) ?? [];
  }
  // Before the node network is set up: an address in use stops the start with nothing touched.
  // Ready (GET /readyz) once the sockets below are served too, not only the node network; alive
  // (GET /livez) while it waits for the cluster network's config.
  let serving = false;
  let starting = 'starting: its sockets are not served yet';
  const metrics = opts.metricsAddr
    ? await serveMetrics(opts.metricsAddr, () => (serving ? rt.node.status() : { ready: false, reason: starting })).catch((e: Error) => {
        throw new ConfigError(`--metrics-addr ${opts.metricsAddr}: ${e.message}`);
      })
    : undefined;
  let defaultCni = cfg.defaultNetwork.cni;
  if (defaultCni === 'auto') {
    starting = `starting: waiting for the cluster network's CNI config in ${cfg.cni.confDir} (defaultNetwork.cni: auto)`;
    defaultCni = await clusterNetwork(cfg);
    starting = 'starting: its sockets are not served yet';
  }
  const rt = new NetworkRuntime(cfg, opts.stateDir, defaultCni);
  rt.podDevices = (namespace, name) => podDevices(cfg.networks.podResourcesSocket, namespace, name);
  if (cfg.rangesFromNode && !cfg.ranges.length) rt.node.waitForRanges(`waiting for the pod ranges of Node ${cfg.kubernetes.nodeName} (spec.podCIDRs)`);
  await rt.start();
  const agent = api ? new NodeAgent(rt, cfg, opts.stateDir, api) : undefined;
  agent?.start();
  const configWatch = api && cfg.kubernetes.configMap ? new ConfigWatch(rt, cfg, api, { flagLogLevel: opts.logLevel, resyncRoutes: () => agent?.resync() }) : undefined;
  configWatch?.start();
  // networks.everyPod naming a definition kni lacks fails every pod: said once, on the node.
  let nads: NadWatch | undefined;
  const checkEveryPod = () => {
    if (cfg.networks.everyPod.length && (!nads || nads.isSynced)) rt.node.warn('every-pod', everyPodProblem(rt));
  };
  nads = api && cfg.networks.attachmentDefinitions ? new NadWatch(rt, api, checkEveryPod) : undefined;
  nads?.start();
  rt.networks.onChange(checkEveryPod);
  if (!nads) checkEveryPod();
  const podNetworks = api ? new PodNetworks(rt, cfg, api) : undefined;
  podNetworks?.start();
  // Before the sockets are served: an attach waits for the cluster's policies, never passes them by.
  const policyWatch = api && cfg.policy.enabled ? new PolicyWatch(rt, api, cfg.reconcileSeconds * 1000) : undefined;
  policyWatch?.start();
  if (agent && policyWatch) {
    agent.policyVerdicts = () => policyWatch.verdicts();
    agent.podPolicy = (rec) => policyWatch.podPolicy(rec);
  }
  rt.node.warn('policy-cni', policyWatch && rt.cni ? `policy.enabled is true but the default network is a CNI network (${rt.cni.name}): kni's NetworkPolicy isolates only pods on its built-in network; run the CNI network's own policy agent` : undefined);
  if (api && !cfg.policy.enabled) await nftApply(removePolicyTableScript(), 'the network policy table').catch((e: Error) => log('warn', 'policy.enabled is false but the network policy table cannot be removed', { error: e.message }));
  if (agent && podNetworks) agent.owners.localPodUid = (namespace, name) => podNetworks.podUid(namespace, name);
  registerRuntimeGauges({
    podCount: () => rt.podCount(),
    ipamStatus: () => rt.ipamStatus().map((r) => ({ range: r.cidr, size: Number(r.size), used: r.used, free: Number(r.free) })),
    interfacesByNetwork: () => rt.interfacesByNetwork(),
  });
  if (cfg.cri.socket) {
    // Before serving: no attach can be in flight, so the runtime's list is complete.
    await reconcileWithCri(rt, cfg.cri.socket, 0);
    setInterval(() => void reconcileWithCri(rt, cfg.cri.socket, cfg.cri.reconcileSeconds * 1000), cfg.cri.reconcileSeconds * 1000).unref();
  }
  const server = await serve(rt, opts.socket, [{ definition: podNetworkLifecycleService(), handlers: podNetworkLifecycleHandlers(rt) }], agent);
  const cniServer = await serveCni(rt, cfg.cni.socket);
  const nri = nriPlugin(rt, cfg);
  nri?.start();
  startMemoryTrim();
  // Another plugin's config may come (or go) after kni's, and kni's own may be removed or
  // rewritten behind its back: looked at again as often as reconcile runs.
  let confOrderTimer: NodeJS.Timeout | undefined;
  const checkConfOrder = () => {
    const leaving = leavingMarked(opts.stateDir);
    rt.node.warn('uninstalled', leaving ? `kni was uninstalled (${path.join(opts.stateDir, 'leaving')}): its CNI config is gone and not written again, and kni leaves this node when it stops (start it again to stay)` : undefined);
    const drift = rt.node.isSetUp && !leaving ? cniInstallDrift(cfg.cni) : '';
    if (drift) {
      try {
        rt.node.cniConfig = installCni(cfg.cni, cfg.name).conflist;
        driftFindings.inc({ object: 'cni_config' });
        log('warn', 'kni\'s CNI config was changed behind its back: written again', { drift });
        rt.node.recordRepair(`${drift} (kni's CNI config, written again)`, true);
      } catch (e) {
        log('error', 'cannot write the CNI config again', { drift, error: (e as Error).message });
      }
    }
    if (cfg.defaultNetwork.cni === 'auto') {
      // The cluster network's config is taken once: another that now sorts first would be a
      // network of another name, and the pods' cached attachments are under the one in use.
      const first = clusterNetworkConf(cfg.cni.confDir, cfg.cni.confName);
      rt.node.warn('cni-auto-moved', first && first !== defaultCni ? `defaultNetwork.cni is auto and ${first} is now the first other config in ${cfg.cni.confDir}, but kni runs ${defaultCni} (found at start), and new pods get that network: restart kni to take ${path.basename(first)}` : undefined, { file: first });
    }
    const other = shadowingConf(cfg.cni);
    rt.node.warn('cni-conf-order', other && `${other} sorts before ${cfg.cni.confName}: a CNI-calling runtime takes the first config in ${cfg.cni.confDir}, so pods get that network, not kni's; remove it, or name kni's to sort first (cni.confName)`, { file: other });
  };
  rt.node.onReady(() => {
    if (leavingMarked(opts.stateDir)) return void log('warn', 'kni was uninstalled while running: its CNI config is not written again (start kni again to install it)');
    try {
      const { written: files, conflist } = installCni(cfg.cni, cfg.name);
      rt.node.cniConfig = conflist;
      if (files.length) log('info', 'CNI config installed: the runtime now sees the network as ready', { files });
      checkConfOrder();
      confOrderTimer ??= cfg.cni.confDir ? setInterval(checkConfOrder, cfg.reconcileSeconds * 1000).unref() : undefined;
    } catch (e) {
      log('error', 'cannot install the CNI config', { error: (e as Error).message });
    }
  });
  serving = true;
  log('info', 'serving', { version: BUILD.version, commit: BUILD.commit, socket: opts.socket, stateDir: opts.stateDir, config: opts.config ?? '(embedded default)', node: cfg.kubernetes.nodeName || undefined, api: api?.source });

  const shutdown = (signal: string) => {
    // Uninstalled (--uninstall, or the preStop of a deleted DaemonSet): the node network goes
    // too once the calls in flight are answered, if no pod is left on it (core/leave-node.ts).
    const leaving = leavingMarked(opts.stateDir);
    log('info', leaving ? 'shutting down: kni leaves this node' : 'shutting down; pods stay as they are', { signal });
    nri?.stop();
    agent?.stop();
    configWatch?.stop();
    nads?.stop();
    podNetworks?.stop();
    policyWatch?.stop();
    markRestarting(cfg.cni);
    // The CNI calls in flight are answered too (within the 3 s below; one cut short is sent
    // again by kni-cni to the next kni).
    const cniDrained = new Promise<void>((done) => cniServer.close(() => done()));
    metrics?.close();
    server.shutdown(() => void cniDrained.then(async () => {
      const held = podsHeld(rt.sandboxes.values(), rt.netns.values());
      rt.stop();
      if (leaving) await leaveNode(cfg, opts.stateDir, cfg.ranges, held, [opts.socket, cfg.cni.socket]).catch((e) => log('error', 'kni could not leave this node clean', { error: (e as Error).message }));
      // A thread still loading koffi when the process exits aborts it (plugin/sys/threads.ts).
      void Promise.all([threadsLoaded(), Promise.resolve(stopTracing?.()).catch(() => undefined)]).finally(() => process.exit(0));
    }));
    // Leaving: a few iptables processes more (the DaemonSet's 10 s grace holds the preStop's ≤ 4 s too).
    setTimeout(() => process.exit(0), leaving ? 5000 : 3000).unref();
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}

main().catch((e) => {
  const expected = e instanceof ConfigError || e instanceof StateDirInUseError;
  const msg = expected ? (e as Error).message : (e as Error).stack ?? String(e);
  log('error', 'kni-runtime failed to start', { error: msg });
  process.stderr.write(`kni-runtime: ${expected ? msg : (e as Error).message}\n`);
  process.exit(1);
});
