// One CNI call (env + stdin, as the runtime gave them to kni-cni) onto the core.
import { KniError } from '../../plugin/core/errors';
import { bandwidthOf, portMappingOf } from '../../plugin/cni/capability-fields';
import { convertResult } from '../../plugin/cni/cni-network';
import { NetworkRuntime } from '../../plugin/core/network-runtime';
import { CNI_ERR, cniCodeFor, cniError, cniResult, SUPPORTED_VERSIONS } from './cni-result';

export interface CniOutcome {
  exitCode: number;
  output: string;
}

class CniFailure extends Error {
  constructor(readonly code: number, message: string, readonly details = '') {
    super(message);
  }
}

/** CNI_ARGS: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=name;K8S_POD_UID=uid;IgnoreUnknown=1". */
export function parseCniArgs(s: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of s.split(';')) {
    if (!part) continue;
    const eq = part.indexOf('=');
    if (eq <= 0) throw new CniFailure(CNI_ERR.INVALID_ENV, `CNI_ARGS entry ${JSON.stringify(part)} is not KEY=VALUE`);
    out[part.slice(0, eq)] = part.slice(eq + 1);
  }
  return out;
}

export async function handleCni(rt: NetworkRuntime, env: Map<string, string>): Promise<CniOutcome> {
  const command = env.get('CNI_COMMAND') ?? '';
  let version = '1.0.0';
  try {
    let conf: Record<string, any>;
    try {
      conf = JSON.parse(env.get('STDIN') ?? '');
    } catch (e) {
      throw new CniFailure(CNI_ERR.DECODING_FAILURE, 'network config on stdin is not valid JSON', (e as Error).message);
    }
    if (typeof conf !== 'object' || conf === null || Array.isArray(conf)) throw new CniFailure(CNI_ERR.INVALID_CONFIG, 'network config is not a JSON object');
    if (typeof conf.cniVersion === 'string') version = conf.cniVersion;
    if (!SUPPORTED_VERSIONS.includes(version)) {
      const v = version;
      version = '1.0.0';
      throw new CniFailure(CNI_ERR.INCOMPATIBLE_VERSION, `CNI version ${JSON.stringify(v)} is not supported`, `supported: ${SUPPORTED_VERSIONS.join(', ')}`);
    }
    const containerId = env.get('CNI_CONTAINERID') ?? '';
    switch (command) {
      case 'ADD': {
        const args = parseCniArgs(env.get('CNI_ARGS') ?? '');
        const podAnnotations = conf.runtimeConfig?.['io.kubernetes.cri.pod-annotations'];
        // The `ips` and `mac` capabilities, or CNI_ARGS IP=a[,b] / MAC= (as the static IPAM plugin reads them).
        const ips = conf.runtimeConfig?.ips ?? (args.IP ? args.IP.split(',') : undefined);
        const mac = conf.runtimeConfig?.mac ?? args.MAC;
        const rec = await rt.attach({
          sandboxId: containerId,
          netnsPath: env.get('CNI_NETNS') ?? '',
          interfaceName: env.get('CNI_IFNAME') || 'eth0',
          pod: { name: args.K8S_POD_NAME, namespace: args.K8S_POD_NAMESPACE, uid: args.K8S_POD_UID },
          annotations: typeof podAnnotations === 'object' && podAnnotations !== null ? podAnnotations : undefined,
          requestedIps: ips,
          requestedMac: mac,
          bandwidth: bandwidthOf(conf.runtimeConfig?.bandwidth),
          portMappings: Array.isArray(conf.runtimeConfig?.portMappings) ? conf.runtimeConfig.portMappings.map(portMappingOf) : conf.runtimeConfig?.portMappings,
          cgroupParent: conf.runtimeConfig?.cgroupPath,
          entryPoint: 'cni',
        });
        // A CNI default network: the plugins' own result, in the version the caller asked.
        const first = rec.interfaces.find((i) => !i.network);
        const cached = first?.backend === 'cni' ? rt.cni?.cachedResult(rec.id, first.name) : undefined;
        return ok(cached ? convertResult(cached, version) : cniResult(version, rec));
      }
      case 'DEL':
        // Succeeds when the sandbox is unknown or already released (spec: DEL is idempotent).
        // A Kubernetes runtime (CRI: CNI_ARGS name the pod sandbox) calls DEL as it stops the
        // sandbox and removes the netns next; other callers (podman network disconnect) may
        // keep the netns and add again at once, so they get the pod end out of its way (down,
        // renamed, no address) before the answer.
        await rt.detach(containerId, true, 'cni', parseCniArgs(env.get('CNI_ARGS') ?? '').K8S_POD_INFRA_CONTAINER_ID !== undefined);
        return ok(undefined);
      case 'CHECK': {
        const problems = await rt.check(containerId);
        if (problems.length) throw new CniFailure(CNI_ERR.CHECK_FAILED, `sandbox ${containerId} does not match its record`, problems.join('; '));
        return ok(undefined);
      }
      case 'STATUS': {
        const node = rt.node.status();
        if (!node.ready) throw new CniFailure(CNI_ERR.NOT_AVAILABLE, 'node network is not ready', node.reason);
        const full = rt.ipamStatus().filter((r) => r.exhausted);
        // As the CNI spec asks, a full range fails STATUS, but not in Kubernetes: the runtime
        // would report its network not ready, the kubelet the node NotReady, and the node
        // lifecycle controller taint it NoExecute, evicting every pod that does not tolerate it
        // (after 5 minutes by default). There kni's NoSchedule taint keeps new pods away instead
        // (node-agent.ts), and an ADD that finds no address is refused (11) and retried.
        if (full.length && !rt.cfg.kubernetes.nodeName) throw new CniFailure(CNI_ERR.NOT_AVAILABLE, 'pod ranges exhausted: no more pods on this node', full.map((r) => r.cidr).join(', '));
        return ok(undefined);
      }
      case 'GC': {
        const valid = conf['cni.dev/valid-attachments'] ?? conf['cni.dev/attachments'] ?? [];
        if (!Array.isArray(valid)) throw new CniFailure(CNI_ERR.INVALID_CONFIG, 'cni.dev/valid-attachments is not a list');
        const live = valid.map((a: unknown, i: number) => {
          const id = (a as { containerID?: unknown } | null)?.containerID;
          if (typeof id !== 'string') throw new CniFailure(CNI_ERR.INVALID_CONFIG, `cni.dev/valid-attachments[${i}].containerID is not a string`);
          return id;
        });
        await rt.gc(live, 0, 'cni');
        return ok(undefined);
      }
      default:
        throw new CniFailure(CNI_ERR.INVALID_ENV, `CNI_COMMAND ${JSON.stringify(command)} is not ADD, DEL, CHECK, STATUS or GC (kni-cni answers VERSION)`);
    }
  } catch (e) {
    if (e instanceof CniFailure) return fail(cniError(version, e.code, e.message, e.details));
    if (e instanceof KniError) return fail(cniError(version, cniCodeFor(e.code), e.message));
    return fail(cniError(version, CNI_ERR.INTERNAL, `internal error: ${(e as Error).message ?? String(e)}`));
  }
}

const ok = (body: unknown): CniOutcome => ({ exitCode: 0, output: body === undefined ? '' : `${JSON.stringify(body)}\n` });
const fail = (body: unknown): CniOutcome => ({ exitCode: 1, output: `${JSON.stringify(body)}\n` });
