// Elements of nftables sets added and removed over nfnetlink, several sets in one batch: the
// kernel commits a batch whole or not at all, so a pod's host end and its addresses enter (or
// leave) kni's sets together (plugin/node/node-guards.ts). No process is spawned: this runs on
// the attach and detach path. The tables, chains and sets themselves are written at node setup
// with `nft -f` (one spawn, then).
import { ipBytes, parseIp } from '../ipam/ip';
import { BodyWriter } from './body-writer';
import { NetlinkError, NetlinkRequest, NetlinkSocket, NLM_F_CREATE } from './socket';

const NFNL_SUBSYS_NFTABLES = 10;
const NFNL_MSG_BATCH_BEGIN = 0x10;
const NFNL_MSG_BATCH_END = 0x11;
const NFT_MSG_NEWSETELEM = 12;
/** Removes an element and answers success when it is not there (Linux 6.3); DELSETELEM would fail the whole batch with ENOENT. */
const NFT_MSG_DESTROYSETELEM = 30;
const NFTA_SET_ELEM_LIST_TABLE = 1;
const NFTA_SET_ELEM_LIST_SET = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
const NFTA_LIST_ELEM = 1;
const NFTA_SET_ELEM_KEY = 1;
const NFTA_DATA_VALUE = 1;
const IFNAMSIZ = 16;

export const NFPROTO = { inet: 1, bridge: 7 } as const;
export type NftFamily = keyof typeof NFPROTO;

/** Elements of one set: each key as the set's type lays it out (see the key builders below). */
export interface SetElements {
  family: NftFamily;
  table: string;
  set: string;
  keys: Buffer[];
}

/** An interface name as nftables' ifname type holds it: 16 bytes, NUL-padded. */
export function ifnameKey(name: string): Buffer {
  const b = Buffer.alloc(IFNAMSIZ);
  if (b.write(name, 'latin1') >= IFNAMSIZ) throw new Error(`interface name ${name} is longer than ${IFNAMSIZ - 1} bytes`);
  return b;
}

/** An address as ipv4_addr or ipv6_addr (network order). */
export function addressKey(address: string): Buffer {
  const ip = parseIp(address);
  return ipBytes(ip.family, ip.value);
}

/** A concatenation (`ifname . ipv4_addr`): each part in turn, each padded to 4 bytes (the kernel's NFT_REG32 slots). */
export const concatKey = (...parts: Buffer[]): Buffer => Buffer.concat(parts.flatMap((p) => (p.length % 4 ? [p, Buffer.alloc(4 - (p.length % 4))] : [p])));

/** nfgenmsg: family, version 0, resource id (big-endian). */
function nfgenmsg(w: BodyWriter, family: number, resId = 0): void {
  const at = w.struct(4);
  w.u8At(at, family);
  w.u16At(at + 2, ((resId & 0xff) << 8) | (resId >> 8));
}

function batchMarker(type: number): NetlinkRequest {
  const w = new BodyWriter();
  nfgenmsg(w, 0, NFNL_SUBSYS_NFTABLES);
  return { type, flags: 0, body: w.take(), what: 'nftables batch' };
}

function elementsRequest(op: 'add' | 'remove', e: SetElements): NetlinkRequest {
  const w = new BodyWriter();
  nfgenmsg(w, NFPROTO[e.family]);
  w.string(NFTA_SET_ELEM_LIST_TABLE, e.table);
  w.string(NFTA_SET_ELEM_LIST_SET, e.set);
  const list = w.begin(NFTA_SET_ELEM_LIST_ELEMENTS);
  for (const key of e.keys) {
    const elem = w.begin(NFTA_LIST_ELEM);
    const k = w.begin(NFTA_SET_ELEM_KEY);
    w.bytes(NFTA_DATA_VALUE, key);
    w.end(k);
    w.end(elem);
  }
  w.end(list);
  const type = (NFNL_SUBSYS_NFTABLES << 8) | (op === 'add' ? NFT_MSG_NEWSETELEM : NFT_MSG_DESTROYSETELEM);
  // NEWSETELEM without NLM_F_EXCL: an element already there is no error.
  return { type, flags: op === 'add' ? NLM_F_CREATE : 0, body: w.take(), what: `${op} ${e.keys.length} element(s) ${op === 'add' ? 'to' : 'from'} nftables set ${e.family} ${e.table} ${e.set}` };
}

/**
 * Adds and removes elements of several sets in one transaction (removals first). Throws the
 * kernel's first error (then nothing changed): a missing table or set is ENOENT.
 */
export function updateSetElements(sock: NetlinkSocket, add: SetElements[], remove: SetElements[] = []): void {
  const ops = [...remove.filter((e) => e.keys.length).map((e) => elementsRequest('remove', e)), ...add.filter((e) => e.keys.length).map((e) => elementsRequest('add', e))];
  if (!ops.length) return;
  try {
    sock.batch(batchMarker(NFNL_MSG_BATCH_BEGIN), ops, batchMarker(NFNL_MSG_BATCH_END));
  } catch (e) {
    if (e instanceof NetlinkError) throw e;
    throw new Error(`nftables batch: ${(e as Error).message}`);
  }
}
