// Config settings for kni in a cluster (see config.ts for the file as a whole).
import path from 'node:path';
import type { Config } from './config-types';
import { Cidr, parseCidr } from '../ipam/ip';
import { interfaceName } from './validate';
import { DNS_LABEL, parseEveryPod } from '../networks/network-selection';

/** A Kubernetes object name (DNS subdomain), as Node names are. */
const NODE_NAME = /^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/;
/** "namespace/name" of a namespaced object (kni's ConfigMaps). */
const NAMESPACED_NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\/[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/;

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'];

/**
 * The settings of kni as part of a cluster: its Kubernetes connection, how it reaches other
 * nodes (backend, vxlan), a CNI default network, secondary networks, required extensions, the log level. Each
 * problem is appended to `problems`; `ranges` is emptied where the Node or the plugins give it.
 */
export function parseClusterSettings(r: Record<string, unknown>, cfg: Config, problems: string[]): void {
  if (r.kubernetes !== undefined) {
    const k = r.kubernetes as Record<string, unknown>;
    if (typeof k !== 'object' || k === null || Array.isArray(k)) problems.push('kubernetes must be a map of settings');
    else {
      for (const key of Object.keys(k)) if (!['nodeName', 'kubeconfig', 'configMap', 'configKey'].includes(key)) problems.push(`unknown setting "kubernetes.${key}"`);
      if (k.nodeName !== undefined) {
        if (typeof k.nodeName !== 'string' || (k.nodeName !== '' && !NODE_NAME.test(k.nodeName))) problems.push(`kubernetes.nodeName ${JSON.stringify(k.nodeName)} is not a Node name`);
        else cfg.kubernetes.nodeName = k.nodeName;
      }
      if (k.kubeconfig !== undefined) {
        if (typeof k.kubeconfig !== 'string' || (k.kubeconfig !== '' && !path.isAbsolute(k.kubeconfig))) problems.push('kubernetes.kubeconfig must be an absolute path (or empty for the in-cluster service account)');
        else cfg.kubernetes.kubeconfig = k.kubeconfig;
      }
      if (k.configMap !== undefined) {
        if (typeof k.configMap !== 'string' || (k.configMap !== '' && !NAMESPACED_NAME.test(k.configMap))) problems.push(`kubernetes.configMap ${JSON.stringify(k.configMap)} must be "namespace/name"`);
        else cfg.kubernetes.configMap = k.configMap;
      }
      if (k.configKey !== undefined) {
        if (typeof k.configKey !== 'string' || !/^[-._a-zA-Z0-9]{1,253}$/.test(k.configKey)) problems.push('kubernetes.configKey must be a ConfigMap key');
        else cfg.kubernetes.configKey = k.configKey;
      }
    }
  }
  const fromEnv = process.env.KNI_NODE_NAME;
  if (fromEnv !== undefined && fromEnv !== '') {
    if (!NODE_NAME.test(fromEnv)) problems.push(`KNI_NODE_NAME ${JSON.stringify(fromEnv)} is not a Node name`);
    else cfg.kubernetes.nodeName = fromEnv;
  }
  if (r.backend !== undefined) {
    if (r.backend !== 'auto' && r.backend !== 'host-gw' && r.backend !== 'vxlan' && r.backend !== 'none') problems.push(`backend must be auto, host-gw, vxlan or none, not ${JSON.stringify(r.backend)}`);
    else cfg.backend = r.backend;
  }
  if (r.vxlan !== undefined) {
    const v = r.vxlan as Record<string, unknown>;
    if (typeof v !== 'object' || v === null || Array.isArray(v)) problems.push('vxlan must be a map of settings');
    else {
      for (const key of Object.keys(v)) if (!['vni', 'port', 'device', 'txChecksumOffload'].includes(key)) problems.push(`unknown setting "vxlan.${key}"`);
      if (v.vni !== undefined) {
        if (!Number.isInteger(v.vni) || (v.vni as number) < 1 || (v.vni as number) > 0xffffff) problems.push('vxlan.vni must be a whole number from 1 to 16777215');
        else cfg.vxlan.vni = v.vni as number;
      }
      if (v.port !== undefined) {
        if (!Number.isInteger(v.port) || (v.port as number) < 1 || (v.port as number) > 65535) problems.push('vxlan.port must be a port number');
        else cfg.vxlan.port = v.port as number;
      }
      if (v.txChecksumOffload !== undefined) {
        if (v.txChecksumOffload !== true && v.txChecksumOffload !== false && v.txChecksumOffload !== 'auto') problems.push(`vxlan.txChecksumOffload must be true, false or "auto", not ${JSON.stringify(v.txChecksumOffload)}`);
        else cfg.vxlan.txChecksumOffload = v.txChecksumOffload;
      }
      if (v.device !== undefined) {
        try {
          cfg.vxlan.device = interfaceName(v.device, 'vxlan.device');
        } catch (e) {
          problems.push((e as Error).message);
        }
      }
    }
  }
  if (r.peerProbe !== undefined) parsePeerProbe(r.peerProbe, cfg, problems);
  if (r.logLevel !== undefined) {
    if (typeof r.logLevel !== 'string' || !LOG_LEVELS.includes(r.logLevel)) problems.push(`logLevel must be one of ${LOG_LEVELS.join(', ')}`);
    else cfg.logLevel = r.logLevel;
  }
  if (r.defaultNetwork !== undefined) {
    const d = r.defaultNetwork as Record<string, unknown>;
    if (typeof d !== 'object' || d === null || Array.isArray(d)) problems.push('defaultNetwork must be a map of settings');
    else {
      for (const key of Object.keys(d)) if (!['cni', 'binDirs', 'chrootDir', 'readinessIndicatorFile'].includes(key)) problems.push(`unknown setting "defaultNetwork.${key}"`);
      if (d.readinessIndicatorFile !== undefined) {
        if (typeof d.readinessIndicatorFile !== 'string' || (d.readinessIndicatorFile !== '' && !path.isAbsolute(d.readinessIndicatorFile))) problems.push('defaultNetwork.readinessIndicatorFile must be an absolute path (or empty)');
        else if (d.readinessIndicatorFile && !d.cni) problems.push('defaultNetwork.readinessIndicatorFile goes with defaultNetwork.cni: it says when that network\'s own agent is ready');
        else cfg.defaultNetwork.readinessIndicatorFile = d.readinessIndicatorFile;
      }
      if (d.chrootDir !== undefined) {
        if (typeof d.chrootDir !== 'string' || (d.chrootDir !== '' && !path.isAbsolute(d.chrootDir))) problems.push('defaultNetwork.chrootDir must be an absolute directory (the host\'s root as mounted in kni\'s container) or empty');
        else cfg.defaultNetwork.chrootDir = d.chrootDir;
      }
      if (d.cni !== undefined) {
        if (typeof d.cni !== 'string' || (d.cni !== '' && d.cni !== 'auto' && !path.isAbsolute(d.cni))) problems.push('defaultNetwork.cni must be the absolute path of a CNI conflist, "auto" (the first other CNI config in cni.confDir, as Multus finds the cluster network) or empty (the built-in network)');
        else cfg.defaultNetwork.cni = d.cni;
      }
      if (d.binDirs !== undefined) {
        if (!Array.isArray(d.binDirs) || d.binDirs.length === 0 || d.binDirs.some((b) => typeof b !== 'string' || !path.isAbsolute(b))) problems.push('defaultNetwork.binDirs must list absolute directories');
        else cfg.defaultNetwork.binDirs = d.binDirs as string[];
      }
    }
  }
  // The container's layout, not the network's: kni's DaemonSet mounts the host's root and says
  // where in its env, so one ConfigMap serves kni in that container and kni run on a node by hand.
  const chrootFromEnv = process.env.KNI_CHROOT_DIR;
  if (chrootFromEnv && (r.defaultNetwork as { chrootDir?: unknown } | undefined)?.chrootDir === undefined) {
    if (!path.isAbsolute(chrootFromEnv)) problems.push(`KNI_CHROOT_DIR ${JSON.stringify(chrootFromEnv)} must be an absolute directory`);
    else cfg.defaultNetwork.chrootDir = chrootFromEnv;
  }
  if (r.extensions !== undefined) {
    const x = r.extensions as Record<string, unknown>;
    if (typeof x !== 'object' || x === null || Array.isArray(x)) problems.push('extensions must be a map of settings');
    else {
      for (const key of Object.keys(x)) if (key !== 'required' && key !== 'ownerGraceSeconds') problems.push(`unknown setting "extensions.${key}"`);
      if (x.ownerGraceSeconds !== undefined) {
        if (!Number.isInteger(x.ownerGraceSeconds) || (x.ownerGraceSeconds as number) < 0) problems.push('extensions.ownerGraceSeconds must be a whole number of seconds');
        else cfg.extensions.ownerGraceSeconds = x.ownerGraceSeconds as number;
      }
      if (x.required !== undefined) {
        if (!Array.isArray(x.required) || x.required.some((n) => typeof n !== 'string' || !/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(n))) problems.push('extensions.required must list extension names (DNS labels)');
        else cfg.extensions.required = x.required as string[];
      }
    }
  }
  if (r.networks !== undefined) {
    const n = r.networks as Record<string, unknown>;
    if (typeof n !== 'object' || n === null || Array.isArray(n)) problems.push('networks must be a map of settings');
    else {
      for (const key of Object.keys(n)) if (!['dir', 'attachmentDefinitions', 'podStatus', 'namespaceIsolation', 'globalNamespaces', 'podResourcesSocket', 'deviceInfoDir', 'everyPod', 'systemNamespaces'].includes(key)) problems.push(`unknown setting "networks.${key}"`);
      if (n.dir !== undefined) {
        if (typeof n.dir !== 'string' || (n.dir !== '' && !path.isAbsolute(n.dir))) problems.push('networks.dir must be an absolute directory (or empty: no file definitions)');
        else cfg.networks.dir = n.dir;
      }
      for (const key of ['attachmentDefinitions', 'podStatus', 'namespaceIsolation'] as const) {
        if (n[key] === undefined) continue;
        if (typeof n[key] !== 'boolean') problems.push(`networks.${key} must be true or false`);
        else cfg.networks[key] = n[key] as boolean;
      }
      for (const key of ['globalNamespaces', 'systemNamespaces'] as const) {
        const g = n[key];
        if (g === undefined) continue;
        if (!Array.isArray(g) || g.some((x) => typeof x !== 'string' || !DNS_LABEL.test(x))) problems.push(`networks.${key} must list namespace names`);
        else cfg.networks[key] = g as string[];
      }
      if (n.everyPod !== undefined) {
        const e = n.everyPod;
        if (!Array.isArray(e) || e.some((x) => typeof x !== 'string')) problems.push('networks.everyPod must list networks ("name" in kube-system, or "namespace/name", each with an optional "@interface")');
        else {
          try {
            parseEveryPod(e as string[]);
            cfg.networks.everyPod = e as string[];
          } catch (err) {
            problems.push((err as Error).message);
          }
        }
      }
      for (const [key, what] of [['podResourcesSocket', "an absolute path (the kubelet's pod-resources socket)"], ['deviceInfoDir', 'an absolute directory']] as const) {
        const v = n[key];
        if (v === undefined) continue;
        if (typeof v !== 'string' || !path.isAbsolute(v)) problems.push(`networks.${key} must be ${what}`);
        else cfg.networks[key] = v;
      }
    }
  }
  if (r.nodeIpam !== undefined) parseNodeIpam(r.nodeIpam, cfg, problems);
  if (cfg.nodeIpam.clusterCIDRs.length) {
    if (!cfg.kubernetes.nodeName) problems.push('nodeIpam needs kubernetes.nodeName (KNI_NODE_NAME): it hands each Node its pod ranges');
    if (r.ranges !== undefined) problems.push('nodeIpam and ranges exclude each other: nodeIpam hands each Node its ranges');
    if (cfg.defaultNetwork.cni) problems.push('nodeIpam hands out the built-in network\'s ranges: with defaultNetwork.cni the plugins\' IPAM hands out addresses');
  }
  if (cfg.defaultNetwork.cni && r.ranges !== undefined) problems.push('ranges belong to the built-in network: with defaultNetwork.cni the plugins\' IPAM hands out addresses');
  cfg.rangesFromNode = !cfg.defaultNetwork.cni && cfg.kubernetes.nodeName !== '' && r.ranges === undefined;
  if (cfg.rangesFromNode || cfg.defaultNetwork.cni) cfg.ranges = [];
}


/**
 * nodeIpam: the cluster's pod CIDRs (one per family) and each Node's block size, as
 * kube-controller-manager's --cluster-cidr and --node-cidr-mask-size-ipv4/-ipv6 take them. At
 * most 65,536 blocks per family (16 bits between the two prefixes), as it allows.
 */
function parseNodeIpam(v: unknown, cfg: Config, problems: string[]): void {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    problems.push('nodeIpam must be a map of settings');
    return;
  }
  const n = v as Record<string, unknown>;
  for (const key of Object.keys(n)) if (!['clusterCIDRs', 'nodeMaskSizeIPv4', 'nodeMaskSizeIPv6', 'configMap'].includes(key)) problems.push(`unknown setting "nodeIpam.${key}"`);
  for (const [key, family, min, max] of [['nodeMaskSizeIPv4', 4, 8, 30], ['nodeMaskSizeIPv6', 6, 16, 126]] as const) {
    const m = n[key];
    if (m === undefined) continue;
    if (!Number.isInteger(m) || (m as number) < min || (m as number) > max) problems.push(`nodeIpam.${key} must be a whole number from ${min} to ${max} (each Node's IPv${family} block)`);
    else cfg.nodeIpam[key] = m as number;
  }
  if (n.configMap !== undefined) {
    if (typeof n.configMap !== 'string' || !NAMESPACED_NAME.test(n.configMap)) problems.push(`nodeIpam.configMap ${JSON.stringify(n.configMap)} must be "namespace/name"`);
    else cfg.nodeIpam.configMap = n.configMap;
  }
  const list = n.clusterCIDRs;
  if (list === undefined) return;
  if (!Array.isArray(list) || list.length > 2 || list.some((x) => typeof x !== 'string')) {
    problems.push('nodeIpam.clusterCIDRs must list the cluster\'s pod CIDRs, at most one per IP family');
    return;
  }
  const cidrs: Cidr[] = [];
  for (const text of list as string[]) {
    let c: Cidr;
    try {
      c = parseCidr(text);
    } catch (e) {
      problems.push(`nodeIpam.clusterCIDRs: ${(e as Error).message}`);
      continue;
    }
    if (cidrs.some((o) => o.family === c.family)) problems.push(`nodeIpam.clusterCIDRs has two IPv${c.family} CIDRs`);
    const mask = c.family === 4 ? cfg.nodeIpam.nodeMaskSizeIPv4 : cfg.nodeIpam.nodeMaskSizeIPv6;
    if (mask < c.prefixLength) problems.push(`nodeIpam.clusterCIDRs: ${c.text} is smaller than one Node's block (/${mask})`);
    else if (mask - c.prefixLength > 16) problems.push(`nodeIpam.clusterCIDRs: ${c.text} cut into /${mask} blocks makes more than 65536 of them`);
    cidrs.push(c);
  }
  cfg.nodeIpam.clusterCIDRs = cidrs;
}

function parsePeerProbe(v: unknown, cfg: Config, problems: string[]): void {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    problems.push('peerProbe must be a map of settings');
    return;
  }
  const p = v as Record<string, unknown>;
  for (const key of Object.keys(p)) if (!['port', 'intervalSeconds', 'timeoutSeconds'].includes(key)) problems.push(`unknown setting "peerProbe.${key}"`);
  if (p.port !== undefined) {
    if (!Number.isInteger(p.port) || (p.port as number) < 0 || (p.port as number) > 65535) problems.push('peerProbe.port must be a port number, or 0 for no probe');
    else cfg.peerProbe.port = p.port as number;
  }
  for (const [key, max] of [['intervalSeconds', 3600], ['timeoutSeconds', 60]] as const) {
    if (p[key] === undefined) continue;
    if (typeof p[key] !== 'number' || !((p[key] as number) >= 1 && (p[key] as number) <= max)) problems.push(`peerProbe.${key} must be a number from 1 to ${max}`);
    else cfg.peerProbe[key] = p[key] as number;
  }
  if (cfg.peerProbe.timeoutSeconds >= cfg.peerProbe.intervalSeconds) problems.push(`peerProbe.timeoutSeconds (${cfg.peerProbe.timeoutSeconds}) must be below peerProbe.intervalSeconds (${cfg.peerProbe.intervalSeconds})`);
}
