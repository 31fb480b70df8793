// CNI result and error objects (spec 0.4.0, 1.0.0, 1.1.0) from a sandbox record.
import { ErrorCode } from '../../plugin/core/errors';
import { defaultGateways } from '../../plugin/core/network-backend';
import { defaultDestination, familyOf } from '../../plugin/ipam/ip';
import { SandboxRecord } from '../../plugin/store/records';

// kni-cni answers VERSION itself with the same list: keep them equal.
export const SUPPORTED_VERSIONS = ['0.4.0', '1.0.0', '1.1.0'];

export function cniResult(version: string, rec: SandboxRecord): Record<string, unknown> {
  const interfaces: Record<string, unknown>[] = [];
  const ips: Record<string, unknown>[] = [];
  const routes: Record<string, unknown>[] = [];
  // The default network's interface only: runtimes take the pod IPs from the result, and a
  // secondary network's addresses are not the pod's IP (Multus answers the same way).
  for (const itf of rec.interfaces.filter((i) => !i.network)) {
    interfaces.push({ name: itf.hostVeth });
    const podIndex = interfaces.length;
    interfaces.push({ name: itf.name, mac: itf.mac, sandbox: rec.netnsPath, ...(version === '1.1.0' ? { mtu: itf.mtu } : {}) });
    for (const a of itf.addresses) ips.push({ ...(version === '0.4.0' ? { version: String(a.family) } : {}), address: `${a.address}/${a.prefixLength}`, gateway: a.gateway, interface: podIndex });
    // The default routes the pod has through it: a network's default-route may have taken some.
    for (const gw of defaultGateways(rec, itf)) routes.push({ dst: defaultDestination(familyOf(gw)), gw });
  }
  return { cniVersion: version, interfaces, ips, routes, dns: {} };
}

/** CNI error codes (SPEC "Error" section); 100+ are plugin-specific. */
export const CNI_ERR = {
  INCOMPATIBLE_VERSION: 1,
  UNSUPPORTED_FIELD: 2,
  UNKNOWN_CONTAINER: 3,
  INVALID_ENV: 4,
  IO_FAILURE: 5,
  DECODING_FAILURE: 6,
  INVALID_CONFIG: 7,
  TRY_AGAIN_LATER: 11,
  NOT_AVAILABLE: 50,
  LIMITED_CONNECTIVITY: 51,
  CHECK_FAILED: 100,
  INTERNAL: 101,
  ALREADY_ATTACHED: 102,
} as const;

export function cniCodeFor(code: ErrorCode): number {
  switch (code) {
    case 'INVALID_ARGUMENT': return CNI_ERR.INVALID_ENV;
    case 'NOT_FOUND': return CNI_ERR.UNKNOWN_CONTAINER;
    case 'RESOURCE_EXHAUSTED':
    case 'UNAVAILABLE':
    case 'FAILED_PRECONDITION': return CNI_ERR.TRY_AGAIN_LATER;
    case 'ALREADY_EXISTS': return CNI_ERR.ALREADY_ATTACHED;
    default: return CNI_ERR.INTERNAL;
  }
}

export const cniError = (version: string, code: number, msg: string, details = ''): Record<string, unknown> => ({
  cniVersion: version,
  code,
  msg,
  ...(details ? { details } : {}),
});
