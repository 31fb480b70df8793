// Config settings for how kni meets the container runtimes: its CNI shim and conflist, the CRI
// and NRI connections, which runtime handlers are VMs (see config.ts for the file as a whole).
import path from 'node:path';
import type { Config, SandboxKind } from './config-types';
import { socketPathProblem } from './validate';

const CNI_KEYS = new Set(['socket', 'confDir', 'confName', 'binDir']);

/** cni, cri, nri, runtimeHandlers and vmTap; each problem is appended to `problems`. */
export function parseRuntimeSettings(r: Record<string, unknown>, cfg: Config, problems: string[]): void {
  if (r.cni !== undefined) {
    if (typeof r.cni !== 'object' || r.cni === null || Array.isArray(r.cni)) problems.push('cni must be a map of settings');
    else {
      const c = r.cni as Record<string, unknown>;
      for (const k of Object.keys(c)) {
        if (!CNI_KEYS.has(k)) problems.push(`unknown setting "cni.${k}"`);
        else if (typeof c[k] !== 'string') problems.push(`cni.${k} must be a string`);
        else if (k === 'confName') {
          if (!/^[A-Za-z0-9][A-Za-z0-9_.-]*\.conflist$/.test(c[k] as string)) problems.push(`cni.confName ${JSON.stringify(c[k])} must be a plain file name ending in .conflist`);
          else cfg.cni.confName = c[k] as string;
        } else {
          const v = c[k] as string;
          const problem = v === '' ? '' : k === 'socket' ? socketPathProblem(v, 'cni.socket') : path.isAbsolute(v) ? '' : `cni.${k} must be an absolute path`;
          if (problem) problems.push(problem);
          else (cfg.cni as unknown as Record<string, string>)[k] = v === '' ? '' : path.normalize(v);
        }
      }
      if (!cfg.cni.socket) problems.push('cni.socket must not be empty');
    }
  }
  if (r.cri !== undefined) {
    const c = r.cri as Record<string, unknown>;
    if (typeof c !== 'object' || c === null || Array.isArray(c)) problems.push('cri must be a map of settings');
    else {
      for (const k of Object.keys(c)) if (k !== 'socket' && k !== 'reconcileSeconds') problems.push(`unknown setting "cri.${k}"`);
      if (c.socket !== undefined) {
        const problem = c.socket === '' ? '' : socketPathProblem(c.socket, 'cri.socket');
        if (problem) problems.push(problem);
        else cfg.cri.socket = c.socket as string;
      }
      if (c.reconcileSeconds !== undefined) {
        if (!Number.isInteger(c.reconcileSeconds) || (c.reconcileSeconds as number) < 1) problems.push('cri.reconcileSeconds must be a whole number of seconds, at least 1');
        else cfg.cri.reconcileSeconds = c.reconcileSeconds as number;
      }
    }
  }
  if (r.nri !== undefined) {
    const n = r.nri as Record<string, unknown>;
    if (typeof n !== 'object' || n === null || Array.isArray(n)) problems.push('nri must be a map of settings');
    else {
      for (const k of Object.keys(n)) if (!['enabled', 'socket', 'pluginName', 'pluginIndex', 'syncGraceSeconds'].includes(k)) problems.push(`unknown setting "nri.${k}"`);
      if (n.enabled !== undefined) {
        if (typeof n.enabled !== 'boolean') problems.push('nri.enabled must be true or false');
        else cfg.nri.enabled = n.enabled;
      }
      if (n.socket !== undefined) {
        const problem = socketPathProblem(n.socket, 'nri.socket');
        if (problem) problems.push(problem);
        else cfg.nri.socket = n.socket as string;
      }
      if (n.pluginName !== undefined) {
        if (typeof n.pluginName !== 'string' || !/^[a-z0-9][a-z0-9._-]{0,62}$/.test(n.pluginName)) problems.push('nri.pluginName must be a short lower-case name');
        else cfg.nri.pluginName = n.pluginName;
      }
      if (n.pluginIndex !== undefined) {
        if (typeof n.pluginIndex !== 'string' || !/^[0-9]{2}$/.test(n.pluginIndex)) problems.push('nri.pluginIndex must be two digits, like "10"');
        else cfg.nri.pluginIndex = n.pluginIndex;
      }
      if (n.syncGraceSeconds !== undefined) {
        if (!Number.isInteger(n.syncGraceSeconds) || (n.syncGraceSeconds as number) < 0) problems.push('nri.syncGraceSeconds must be a whole number of seconds');
        else cfg.nri.syncGraceSeconds = n.syncGraceSeconds as number;
      }
    }
  }
  if (r.runtimeHandlers !== undefined) {
    const h = r.runtimeHandlers as Record<string, unknown>;
    if (typeof h !== 'object' || h === null || Array.isArray(h)) problems.push('runtimeHandlers must map handler names to vm or container');
    else {
      const out: Record<string, SandboxKind> = {};
      for (const [name, kind] of Object.entries(h)) {
        if (!/^[a-z0-9]([a-z0-9.-]{0,62})$/.test(name)) problems.push(`runtimeHandlers: ${JSON.stringify(name)} is not a runtime handler name`);
        else if (kind !== 'vm' && kind !== 'container') problems.push(`runtimeHandlers.${name} must be vm or container, not ${JSON.stringify(kind)}`);
        else out[name] = kind;
      }
      cfg.runtimeHandlers = out;
    }
  }
  if (r.vmTap !== undefined) {
    if (typeof r.vmTap !== 'boolean') problems.push('vmTap must be true or false');
    else cfg.vmTap = r.vmTap;
  }
}
