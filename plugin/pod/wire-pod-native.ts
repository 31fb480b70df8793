// The binding of wire-pod.c (hack/setup.sh and the image build compile it to
// dist/bin/libkni-wire.so): one call wires a pod interface. Why it is C: wire-pod.c's header.
import koffi from 'koffi';
import path from 'node:path';

/** Where the library is, from dist/plugin/pod. */
const WIRE_LIBRARY = path.join(__dirname, '../../bin/libkni-wire.so');

function load(): ReturnType<typeof koffi.load> {
  try {
    return koffi.load(WIRE_LIBRARY);
  } catch (e) {
    throw new Error(`kni's pod wiring library ${WIRE_LIBRARY} cannot be loaded (${(e as Error).message}): build it with bash hack/setup.sh`);
  }
}

const lib = load();
const wire = lib.func('int kni_wire_pod(int host_fd, int home_fd, int netns_fd, int bridge, int routed, int mtu, const char *host, const char *pod, const char *alias, const char *host_mac, const char *pod_mac, const char *addrs, void *result)');
const build = lib.func('int kni_wire_build(int netns_fd, int bridge, int routed, int mtu, const char *host, const char *pod, const char *alias, const char *host_mac, const char *pod_mac, const char *addrs, int hidx, int pidx, void *out, uint32_t cap)');

export interface WireSpec {
  bridgeIndex: number;
  routed: boolean;
  mtu: number;
  hostVeth: string;
  podIfName: string;
  alias: string;
  hostMac: string;
  podMac: string;
  /** "address/prefix>gateway" entries joined by ','. */
  addresses: string;
}

export interface WireResult {
  /** 0, or the errno of what failed. */
  errno: number;
  /** 0 the arguments, 1 the pod netns, 2 the veth, 3 the host end's write, 4 the pod end's. */
  stage: number;
  /** The failing request's index in its write, or -1 when a call failed (setns, socket, send, recv). */
  request: number;
  hostIndex: number;
  podIndex: number;
  /** process.hrtime.bigint() readings: the start, the host end done, the end. */
  started: bigint;
  hostDone: bigint;
  ended: bigint;
  kernelMessage: string;
}

const RESULT_BYTES = 304;
const result = Buffer.alloc(RESULT_BYTES); // one per thread: a call returns before the next

export function wirePodNative(hostFd: number, homeFd: number, netnsFd: number, s: WireSpec): WireResult {
  wire(hostFd, homeFd, netnsFd, s.bridgeIndex, s.routed ? 1 : 0, s.mtu, s.hostVeth, s.podIfName, s.alias, s.hostMac, s.podMac, s.addresses, result);
  const end = result.indexOf(0, 48);
  return {
    errno: result.readInt32LE(0),
    stage: result.readInt32LE(4),
    request: result.readInt32LE(8),
    hostIndex: result.readInt32LE(12),
    podIndex: result.readInt32LE(16),
    started: result.readBigInt64LE(24),
    hostDone: result.readBigInt64LE(32),
    ended: result.readBigInt64LE(40),
    kernelMessage: result.toString('utf8', 48, end < 0 ? RESULT_BYTES : end),
  };
}

/** The requests wirePodNative would send, framed, for these ifindexes (the test compares them with the TypeScript builders). */
export function wireRequestsNative(netnsFd: number, s: WireSpec, hostIndex: number, podIndex: number): Buffer {
  const out = Buffer.alloc(16384);
  const n = build(netnsFd, s.bridgeIndex, s.routed ? 1 : 0, s.mtu, s.hostVeth, s.podIfName, s.alias, s.hostMac, s.podMac, s.addresses, hostIndex, podIndex, out, out.length) as number;
  if (n < 0) throw new Error(`kni_wire_build refused ${JSON.stringify(s)}`);
  return out.subarray(0, n);
}
