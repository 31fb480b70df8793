// Where a trace to another node's pod ends: that node's kni says how it delivers the packet to
// its pod (the pod on that node, its interface and host veth as that kni's record and the
// kernel there have them), asked on the peer probe's port, through kni's route, from this node's
// pods' gateway: the same way pods' packets go, and an address only another node's kni has (a
// pod cannot open a connection from it). A trace then shows the whole path from one node.
// One line each way: the asker writes `deliver <address>`, the answer is one JSON object.
import net from 'node:net';

export interface DeliveryHop {
  what: string;
  problem: string;
}

export interface DeliveryAnswer {
  hops: DeliveryHop[];
  /** The pod the address is, when that node has it by name. */
  pod?: { namespace: string; name: string };
}

export const DELIVER_REQUEST = 'deliver ';
/** An answer larger than this, or with more hops, is no kni's. */
const MAX_ANSWER = 64 << 10;
const MAX_HOPS = 16;
const MAX_TEXT = 4096;

/** Asks the kni at `peer.address` (from `peer.source`) how it delivers to `destination`; rejects saying why it could not. */
export function askDelivery(peer: { address: string; source: string }, port: number, destination: string, timeoutMs: number): Promise<DeliveryAnswer> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: peer.address, port, localAddress: peer.source });
    const chunks: Buffer[] = [];
    let bytes = 0;
    const fail = (why: string): void => {
      clearTimeout(timer);
      sock.destroy();
      reject(new Error(why));
    };
    const timer = setTimeout(() => fail(`no answer from ${peer.address} port ${port} within ${timeoutMs / 1000} s`), timeoutMs);
    sock.once('connect', () => sock.write(`${DELIVER_REQUEST}${destination}\n`));
    sock.on('data', (c: Buffer) => {
      bytes += c.length;
      if (bytes > MAX_ANSWER) return fail(`the answer from ${peer.address} is over ${MAX_ANSWER >> 10} KiB`);
      chunks.push(c);
    });
    sock.once('end', () => {
      clearTimeout(timer);
      sock.destroy();
      try {
        resolve(parseDeliveryAnswer(Buffer.concat(chunks).toString('utf8')));
      } catch (e) {
        reject(e);
      }
    });
    sock.once('error', (e: NodeJS.ErrnoException) => fail(`${peer.address} port ${port}: ${e.code ?? e.message}`));
  });
}

/** An answer checked as any input from another process: one JSON object, hops of two strings each. */
export function parseDeliveryAnswer(text: string): DeliveryAnswer {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    // A kni before this answers a probe's greeting instead; one that knows the question (its
    // greeting says how many bytes follow, as every kni that answers it does) greets only when
    // the question came after the moment it waits for one: a busy node.
    if (/^kni \S+ bytes=/.test(text)) throw new Error('its kni took the question for a probe: it did not arrive in time (a busy node?); ask again');
    throw new Error(/^kni \S+/.test(text) ? 'its kni is older and does not say how it delivers' : 'its answer is not JSON');
  }
  const o = v as { error?: unknown; hops?: unknown; pod?: { namespace?: unknown; name?: unknown } };
  if (typeof o?.error === 'string') throw new Error(`its kni: ${o.error.slice(0, MAX_TEXT)}`);
  if (!Array.isArray(o?.hops) || !o.hops.length || o.hops.length > MAX_HOPS) throw new Error('its answer has no hops');
  const hops = o.hops.map((h: { what?: unknown; problem?: unknown }) => {
    if (typeof h?.what !== 'string' || typeof h.problem !== 'string') throw new Error('its answer has a hop that is not {what, problem}');
    return { what: h.what.slice(0, MAX_TEXT), problem: h.problem.slice(0, MAX_TEXT) };
  });
  const pod = o.pod && typeof o.pod.namespace === 'string' && typeof o.pod.name === 'string' ? { namespace: o.pod.namespace, name: o.pod.name } : undefined;
  return { hops, ...(pod ? { pod } : {}) };
}
