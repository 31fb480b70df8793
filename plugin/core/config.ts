// Daemon configuration: YAML or JSON, every field optional, validated as a whole so that a
// bad file is refused at start with every problem named.
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { Cidr, cidrsOverlap, parseCidr } from '../ipam/ip';
import { interfaceName } from './validate';
import { parseClusterSettings } from './config-cluster';
import { parseRuntimeSettings } from './config-runtimes';

export type { CniConfig, CriConfig, NriConfig, SandboxKind, Backend, KubernetesConfig, NodeIpamConfig, DefaultNetworkConfig, NetworksConfig, VxlanConfig, PeerProbeConfig, PodLink, PodWiring, Config } from './config-types';
import type { NodeIpamConfig, Config } from './config-types';

export const DEFAULT_NETNS_ROOTS = [
  '/run/netns',
  '/var/run/netns',
  // containerd with netns_mounts_under_state_dir = true
  '/run/containerd/io.containerd.grpc.v1.cri/netns',
];

/** The config with every CIDR as its text: what JSON can write (a CIDR's base is a bigint). */
export type ConfigText = Omit<Config, 'ranges' | 'nonMasqueradeCIDRs' | 'nodeIpam'> & { ranges: string[]; nonMasqueradeCIDRs: string[]; nodeIpam: Omit<NodeIpamConfig, 'clusterCIDRs'> & { clusterCIDRs: string[] } };
export const configText = (c: Config): ConfigText => ({
  ...c,
  ranges: c.ranges.map((r) => r.text),
  nonMasqueradeCIDRs: c.nonMasqueradeCIDRs.map((r) => r.text),
  nodeIpam: { ...c.nodeIpam, clusterCIDRs: c.nodeIpam.clusterCIDRs.map((r) => r.text) },
});

export const defaultConfig = (): Config => ({
  name: 'kni',
  bridge: 'kni0',
  bridgeMulticastSnooping: false,
  podLink: 'auto',
  mtu: 0,
  ranges: [parseCidr('10.244.0.0/24'), parseCidr('fd00:10:244::/64')],
  rangesFromNode: false,
  logLevel: '',
  kubernetes: { nodeName: '', kubeconfig: '', configMap: '', configKey: 'config.yaml' },
  nodeIpam: { clusterCIDRs: [], nodeMaskSizeIPv4: 24, nodeMaskSizeIPv6: 64, configMap: 'kube-system/kni-node-cidrs' },
  backend: 'auto',
  // 8472: the Linux kernel's and flannel's vxlan port, so firewall rules written for flannel fit.
  vxlan: { vni: 4096, port: 8472, device: 'kni.vxlan', txChecksumOffload: 'auto' },
  peerProbe: { port: 9275, intervalSeconds: 30, timeoutSeconds: 3 },
  // kni's image ships Debian's plugins in /usr/lib/cni; /opt/cni/bin is where nodes keep theirs.
  defaultNetwork: { cni: '', binDirs: ['/opt/cni/bin', '/usr/lib/cni'], chrootDir: '', readinessIndicatorFile: '' },
  networks: { dir: '', attachmentDefinitions: true, podStatus: true, namespaceIsolation: false, globalNamespaces: [], podResourcesSocket: '/var/lib/kubelet/pod-resources/kubelet.sock', deviceInfoDir: '/var/run/k8s.cni.cncf.io/devinfo', everyPod: [], systemNamespaces: ['kube-system'] },
  extensions: { required: [], ownerGraceSeconds: 300 },
  netnsDir: '/run/netns',
  netnsPoolSize: 4,
  allowedNetnsRoots: [...DEFAULT_NETNS_ROOTS],
  masquerade: true,
  nonMasqueradeCIDRs: [],
  allowPodForwarding: true,
  unclaimedNetnsGraceSeconds: 600,
  reconcileSeconds: 60,
  repairOnNotice: true,
  cni: { socket: '/run/kni/cni.sock', confDir: '', confName: '10-kni.conflist', binDir: '' },
  cri: { socket: '', reconcileSeconds: 60 },
  nri: { enabled: false, socket: '/var/run/nri/nri.sock', pluginName: 'kni', pluginIndex: '10', syncGraceSeconds: 60 },
  runtimeHandlers: { kata: 'vm', 'kata-qemu': 'vm', 'kata-clh': 'vm', 'kata-fc': 'vm', 'kata-dragonball': 'vm', 'kata-stratovirt': 'vm' },
  vmTap: false,
  sourceCheck: { optOutNamespaces: ['kube-system'] },
  policy: { enabled: true },
  reservedHostPorts: [9273, 10248, 10249, 10250, 10256],
});

const KEYS = new Set(['name', 'bridge', 'bridgeMulticastSnooping', 'podLink', 'mtu', 'ranges', 'logLevel', 'kubernetes', 'nodeIpam', 'backend', 'vxlan', 'peerProbe', 'defaultNetwork', 'networks', 'extensions', 'netnsDir', 'netnsPoolSize', 'allowedNetnsRoots', 'masquerade', 'nonMasqueradeCIDRs', 'allowPodForwarding', 'unclaimedNetnsGraceSeconds', 'reconcileSeconds', 'repairOnNotice', 'cni', 'cri', 'nri', 'runtimeHandlers', 'vmTap', 'sourceCheck', 'reservedHostPorts', 'policy']);

export class ConfigError extends Error {}

export function parseConfig(raw: unknown, source = 'config'): Config {
  const cfg = defaultConfig();
  const problems: string[] = [];
  if (raw === null || raw === undefined) raw = {};
  if (typeof raw !== 'object' || Array.isArray(raw)) throw new ConfigError(`${source}: not a map of settings`);
  const r = raw as Record<string, unknown>;
  for (const k of Object.keys(r)) if (!KEYS.has(k)) problems.push(`unknown setting ${JSON.stringify(k)}`);

  if (r.name !== undefined) {
    if (typeof r.name !== 'string' || !/^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$/.test(r.name)) problems.push(`name ${JSON.stringify(r.name)} is not a DNS label`);
    else cfg.name = r.name;
  }
  if (r.bridge !== undefined) {
    try {
      cfg.bridge = interfaceName(r.bridge, 'bridge');
    } catch (e) {
      problems.push((e as Error).message);
    }
  }
  if (r.mtu !== undefined && r.mtu !== 'auto') {
    if (!Number.isInteger(r.mtu) || (r.mtu as number) < 576 || (r.mtu as number) > 65535) problems.push(`mtu ${JSON.stringify(r.mtu)} is not "auto" or an integer from 576 to 65535`);
    else cfg.mtu = r.mtu as number;
  }
  if (r.ranges !== undefined) {
    if (!Array.isArray(r.ranges) || r.ranges.length === 0 || r.ranges.length > 2) {
      problems.push('ranges must list one or two CIDRs (at most one per IP family)');
    } else {
      const ranges: Cidr[] = [];
      for (const s of r.ranges) {
        try {
          const c = parseCidr(s as string);
          if (c.family === 4 && c.prefixLength > 30) throw new Error(`range ${c.text} is too small (IPv4 ranges need a prefix of /30 or shorter)`);
          if (c.family === 6 && c.prefixLength > 126) throw new Error(`range ${c.text} is too small (IPv6 ranges need a prefix of /126 or shorter)`);
          if (ranges.some((o) => o.family === c.family)) throw new Error(`two IPv${c.family} ranges (${ranges.find((o) => o.family === c.family)!.text}, ${c.text}): at most one per family`);
          if (ranges.some((o) => cidrsOverlap(o, c))) throw new Error(`range ${c.text} overlaps another range`);
          ranges.push(c);
        } catch (e) {
          problems.push((e as Error).message);
        }
      }
      cfg.ranges = ranges;
    }
  }
  if (cfg.ranges.some((c) => c.family === 6) && cfg.mtu && cfg.mtu < 1280) problems.push(`mtu ${cfg.mtu} is below 1280, the IPv6 minimum`);
  for (const key of ['netnsDir'] as const) {
    if (r[key] !== undefined) {
      if (typeof r[key] !== 'string' || !path.isAbsolute(r[key] as string)) problems.push(`${key} must be an absolute path`);
      else cfg[key] = path.normalize(r[key] as string);
    }
  }
  if (r.allowedNetnsRoots !== undefined) {
    if (!Array.isArray(r.allowedNetnsRoots) || r.allowedNetnsRoots.some((p) => typeof p !== 'string' || !path.isAbsolute(p) || p === '/')) {
      problems.push('allowedNetnsRoots must be a list of absolute paths other than /');
    } else cfg.allowedNetnsRoots = r.allowedNetnsRoots.map((p: string) => path.normalize(p));
  }
  if (!cfg.allowedNetnsRoots.includes(cfg.netnsDir)) cfg.allowedNetnsRoots.push(cfg.netnsDir);
  if (r.bridgeMulticastSnooping !== undefined) {
    if (typeof r.bridgeMulticastSnooping !== 'boolean') problems.push('bridgeMulticastSnooping must be true or false');
    else cfg.bridgeMulticastSnooping = r.bridgeMulticastSnooping;
  }
  if (r.podLink !== undefined) {
    if (r.podLink !== 'auto' && r.podLink !== 'bridge' && r.podLink !== 'routed') problems.push(`podLink ${JSON.stringify(r.podLink)} is not "auto", "bridge" or "routed"`);
    else cfg.podLink = r.podLink;
  }
  if (r.masquerade !== undefined) {
    if (typeof r.masquerade !== 'boolean') problems.push('masquerade must be true or false');
    else cfg.masquerade = r.masquerade;
  }
  if (r.allowPodForwarding !== undefined) {
    if (typeof r.allowPodForwarding !== 'boolean') problems.push('allowPodForwarding must be true or false');
    else cfg.allowPodForwarding = r.allowPodForwarding;
  }
  if (r.repairOnNotice !== undefined) {
    if (typeof r.repairOnNotice !== 'boolean') problems.push('repairOnNotice must be true or false');
    else cfg.repairOnNotice = r.repairOnNotice;
  }
  if (r.nonMasqueradeCIDRs !== undefined) {
    const list = r.nonMasqueradeCIDRs;
    if (!Array.isArray(list) || list.length > 64) problems.push('nonMasqueradeCIDRs must list at most 64 CIDRs');
    else {
      const out: Cidr[] = [];
      for (const s of list) {
        try {
          const c = parseCidr(s as string);
          if (c.prefixLength === 0) throw new Error(`${c.text} would leave every destination unmasqueraded: set masquerade: false instead`);
          if (!out.some((o) => o.text === c.text)) out.push(c);
        } catch (e) {
          problems.push(`nonMasqueradeCIDRs: ${(e as Error).message}`);
        }
      }
      cfg.nonMasqueradeCIDRs = out;
    }
  }
  if (r.unclaimedNetnsGraceSeconds !== undefined) {
    const v = r.unclaimedNetnsGraceSeconds;
    if (!Number.isInteger(v) || (v as number) < 0) problems.push('unclaimedNetnsGraceSeconds must be a whole number of seconds');
    else cfg.unclaimedNetnsGraceSeconds = v as number;
  }
  if (r.netnsPoolSize !== undefined) {
    const v = r.netnsPoolSize;
    if (!Number.isInteger(v) || (v as number) < 0 || (v as number) > 64) problems.push('netnsPoolSize must be a whole number from 0 to 64');
    else cfg.netnsPoolSize = v as number;
  }
  if (r.reconcileSeconds !== undefined) {
    const v = r.reconcileSeconds;
    if (!Number.isInteger(v) || (v as number) < 1) problems.push('reconcileSeconds must be a whole number of seconds, at least 1');
    else cfg.reconcileSeconds = v as number;
  }
  if (r.sourceCheck !== undefined) {
    const sc = r.sourceCheck as { optOutNamespaces?: unknown } | null;
    const list = sc?.optOutNamespaces;
    if (typeof sc !== 'object' || sc === null || Array.isArray(sc) || Object.keys(sc).some((k) => k !== 'optOutNamespaces')) problems.push('sourceCheck takes only optOutNamespaces');
    else if (list !== undefined && (!Array.isArray(list) || list.length > 256 || list.some((n) => typeof n !== 'string' || !/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(n)))) problems.push('sourceCheck.optOutNamespaces must list at most 256 namespace names');
    else if (list) cfg.sourceCheck = { optOutNamespaces: list as string[] };
  }
  if (r.policy !== undefined) {
    const pol = r.policy as { enabled?: unknown } | null;
    if (typeof pol !== 'object' || pol === null || Array.isArray(pol) || Object.keys(pol).some((k) => k !== 'enabled')) problems.push('policy takes only enabled');
    else if (pol.enabled !== undefined && typeof pol.enabled !== 'boolean') problems.push('policy.enabled must be true or false');
    else cfg.policy = { enabled: pol.enabled ?? true };
  }
  if (r.reservedHostPorts !== undefined) {
    const l = r.reservedHostPorts;
    if (!Array.isArray(l) || l.length > 1024 || l.some((p) => !Number.isInteger(p) || p < 1 || p > 65535)) problems.push('reservedHostPorts must list at most 1024 ports from 1 to 65535');
    else cfg.reservedHostPorts = [...new Set(l as number[])];
  }
  parseRuntimeSettings(r, cfg, problems);
  parseClusterSettings(r, cfg, problems);
  if (cfg.defaultNetwork.cni === 'auto') {
    if (!cfg.cni.confDir) problems.push('defaultNetwork.cni "auto" looks for the cluster network\'s config in cni.confDir, which is empty');
    // kni's own conflist sorts before the one it runs, as Multus writes 00-multus.conf.
    else if ((r.cni as { confName?: unknown } | undefined)?.confName === undefined) cfg.cni.confName = '00-kni.conflist';
  }
  if (problems.length) throw new ConfigError(`${source}: ${problems.join('; ')}`);
  return cfg;
}

export function loadConfig(file?: string): Config {
  if (!file) return parseConfig({}, '(embedded default)');
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(`cannot read config ${file}: ${(e as Error).message}`);
  }
  return parseConfigText(text, file);
}

/**
 * A config file's text (YAML is a superset of JSON: one parser for both). What the YAML parser
 * only warns of is refused too: an unknown tag (`mtu: !int 1400` reads as the string "1400")
 * or directive would otherwise be read other than written, with the warning on stderr, outside
 * kni's log.
 */
export function parseConfigText(text: string, source: string): Config {
  const docs = YAML.parseAllDocuments(text, { logLevel: 'silent' });
  // An empty text is no document (an EmptyStream, not an array): every setting its default.
  const list = Array.isArray(docs) ? docs : [];
  if (list.length > 1) throw new ConfigError(`${source}: holds ${list.length} YAML documents; a config is one`);
  const doc = list[0];
  if (!doc) return parseConfig(undefined, source);
  if (doc.errors.length) throw new ConfigError(`${source}: not valid YAML or JSON: ${doc.errors[0].message}`);
  if (doc.warnings.length) throw new ConfigError(`${source}: YAML kni does not read: ${doc.warnings[0].message}`);
  let raw: unknown;
  try {
    raw = doc.toJS();
  } catch (e) {
    // An alias expanded past the parser's limit (a "billion laughs" config).
    throw new ConfigError(`${source}: not valid YAML or JSON: ${(e as Error).message}`);
  }
  return parseConfig(raw, source);
}
