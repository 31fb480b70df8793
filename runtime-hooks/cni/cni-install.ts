// The conflist (and, if asked, the kni-cni binary) a CNI-calling runtime needs on the host.
// The conflist is written only once the node network is ready: a runtime takes its presence
// as "network ready". `kni-runtime --uninstall` takes both away.
import fs from 'node:fs';
import path from 'node:path';
import { CniConfig } from '../../plugin/core/config';
import { makeDir } from '../../plugin/sys/make-dir';

export function conflist(cfg: CniConfig, networkName: string): Record<string, unknown> {
  return {
    cniVersion: '1.0.0',
    cniVersions: ['1.0.0', '1.1.0'],
    name: networkName,
    plugins: [
      {
        type: 'kni-cni',
        socket: cfg.socket,
        // containerd hands the pod annotations over (used to tell VM sandboxes apart).
        capabilities: { 'io.kubernetes.cri.pod-annotations': true, ips: true, mac: true, portMappings: true, bandwidth: true, cgroupPath: true },
      },
    ],
  };
}

const atomicWrite = (file: string, data: string | Buffer, mode: number) => {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.tmp`);
  fs.writeFileSync(tmp, data, { mode });
  fs.renameSync(tmp, file);
};

export function shimBinary(): string {
  return path.join(__dirname, '../../bin/kni-cni');
}

export function installCni(cfg: CniConfig, networkName: string): string[] {
  const written: string[] = [];
  if (cfg.binDir) {
    makeDir(cfg.binDir);
    const target = path.join(cfg.binDir, 'kni-cni');
    atomicWrite(target, fs.readFileSync(shimBinary()), 0o755);
    written.push(target);
  }
  if (cfg.confDir) {
    makeDir(cfg.confDir);
    const target = path.join(cfg.confDir, cfg.confName);
    atomicWrite(target, `${JSON.stringify(conflist(cfg, networkName), null, 2)}\n`, 0o644);
    written.push(target);
  }
  return written;
}

/**
 * The network config a CNI-calling runtime takes instead of kni's, if any: containerd and
 * CRI-O (through libcni) load the first of confDir's *.conf, *.conflist and *.json in name
 * order, so another plugin's file sorting first gives pods that plugin's network, silently.
 */
export function shadowingConf(cfg: CniConfig): string | undefined {
  if (!cfg.confDir) return undefined;
  let names: string[];
  try {
    names = fs.readdirSync(cfg.confDir);
  } catch {
    return undefined;
  }
  const first = names.filter((n) => /\.(conf|conflist|json)$/.test(n)).sort()[0];
  return first !== undefined && first !== cfg.confName ? path.join(cfg.confDir, first) : undefined;
}

export function uninstallCni(cfg: CniConfig): string[] {
  const removed: string[] = [];
  for (const f of [cfg.confDir && path.join(cfg.confDir, cfg.confName), cfg.binDir && path.join(cfg.binDir, 'kni-cni')]) {
    if (f && fs.existsSync(f)) {
      fs.rmSync(f);
      removed.push(f);
    }
  }
  return removed;
}
