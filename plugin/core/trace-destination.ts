// A trace's destination: an address as given (any spelling; kni's canonical text answers), or,
// in a cluster, a Service or pod named as kubectl names them: its address in a family the
// sender has.
import { Family, formatIp, parseIp } from '../ipam/ip';
import { invalid, KniError } from './errors';

export type PodName = { namespace: string; name: string };
/** pod: the pod a destination given as pod/NS/NAME names. */
export type Destination = { family: Family; value: bigint; text: string; pod?: PodName };

/** The addresses of a Service or pod given by name, primary first; throws a KniError saying why there are none. */
export type AddressesOf = (kind: 'service' | 'pod', namespace: string, name: string) => Promise<string[]>;

export function destinationOf(text: unknown): Destination {
  if (typeof text !== 'string' || !text) throw invalid('destination is required: an IPv4 or IPv6 address');
  let ip;
  try {
    ip = parseIp(text.trim());
  } catch (e) {
    throw invalid(`destination: ${(e as Error).message}`);
  }
  return { ...ip, text: formatIp(ip.family, ip.value) };
}

/** A destination by name, as kubectl names objects: service/NAMESPACE/NAME, svc/…, pod/NAMESPACE/NAME. */
const NAMED = /^(service|svc|pod)\/([^/]*)\/([^/]*)$/;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$/;

/**
 * The destination's address: as given, or that of the Service or pod it names, in the first
 * family the sender has (a dual-stack Service's primary ClusterIP where both do).
 */
export async function resolveDestination(destination: unknown, addressesOf: AddressesOf | undefined, families: Family[]): Promise<Destination> {
  const m = typeof destination === 'string' ? NAMED.exec(destination.trim()) : null;
  if (!m) return destinationOf(destination);
  const kind = m[1] === 'pod' ? 'pod' : 'service';
  const [, , namespace, name] = m;
  if (!DNS_LABEL.test(namespace) || namespace.length > 63) throw invalid(`destination ${destination}: namespace ${JSON.stringify(namespace)} is not a DNS label`);
  if (!DNS_SUBDOMAIN.test(name) || name.length > 253) throw invalid(`destination ${destination}: name ${JSON.stringify(name)} is not a DNS subdomain`);
  if (!addressesOf) throw new KniError('FAILED_PRECONDITION', `destination ${destination}: a destination by name needs kni's Kubernetes connection (kubernetes.nodeName), give an address`);
  const addresses = (await addressesOf(kind, namespace, name)).map((a) => destinationOf(a));
  const usable = addresses.find((a) => families.includes(a.family));
  if (!usable) throw new KniError('FAILED_PRECONDITION', `${kind} ${namespace}/${name} has ${addresses.map((a) => a.text).join(', ')}, none of a family the sender has (IPv${families.join(', IPv')})`);
  return kind === 'pod' ? { ...usable, pod: { namespace, name } } : usable;
}
