// The portMappings and bandwidth capabilities read as the Go programs that write and read them
// do. Go's encoding/json finds a struct's fields by name case-insensitively: containerd's go-cni
// marshals its PortMapping and BandWidth structs without json tags (HostPort, IngressRate, …),
// Multus takes a selection's "hostIP" or "hostIp" alike, and plugins written in Go read them
// anyway. A case-sensitive read would silently drop a host port or a host address asked for.

/**
 * An object with its fields found by name, case-insensitively (an exact match wins). Anything
 * that is not an object is passed on as is, for validation to name.
 */
export function goFields(v: unknown, names: string[]): unknown {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return v;
  const out: Record<string, unknown> = {};
  for (const [k, val] of Object.entries(v)) {
    const name = names.find((n) => n === k) ?? names.find((n) => n.toLowerCase() === k.toLowerCase());
    if (name && (out[name] === undefined || name === k)) out[name] = val;
  }
  return out;
}

/** One CNI portMappings entry ({hostPort, containerPort, protocol, hostIP}, any case) in the form validate.portMappings reads. */
export function portMappingOf(m: unknown): unknown {
  const f = goFields(m, ['protocol', 'containerPort', 'hostPort', 'hostIP']);
  if (typeof f !== 'object' || f === null || Array.isArray(f)) return f;
  const { protocol, containerPort, hostPort, hostIP } = f as Record<string, unknown>;
  return { protocol, containerPort, hostPort, hostIp: hostIP };
}

/** A CNI bandwidth object ({ingressRate, ingressBurst, egressRate, egressBurst}, any case). */
export const bandwidthOf = (b: unknown): unknown => goFields(b, ['ingressRate', 'ingressBurst', 'egressRate', 'egressBurst']);
