// Traffic control (RTM_NEWQDISC / RTM_NEWTFILTER, struct tcmsg): the ingress qdisc and a u32
// "match everything" filter whose mirred action redirects every frame to another device's
// egress — the pairing Kata's tcfilter model uses between a pod's veth and a VM's tap, and
// the way a pod's egress reaches the ifb device it is shaped on — and the TBF qdisc.
import { BodyWriter, bodyWriter } from './body-writer';
import { NetlinkRequest, NLM_F_CREATE, NLM_F_EXCL } from './socket';

const RTM_NEWQDISC = 36;
const RTM_DELQDISC = 37;
const RTM_NEWTFILTER = 44;
const TCA_KIND = 1;
const TCA_OPTIONS = 2;
const TC_H_INGRESS = 0xfffffff1;
const INGRESS_HANDLE = 0xffff0000;
const ETH_P_ALL_BE = 0x0300; // htons(ETH_P_ALL = 0x0003)
const TCA_U32_SEL = 5;
const TCA_U32_ACT = 7;
const TC_U32_TERMINAL = 1;
const TCA_ACT_KIND = 1;
const TCA_ACT_OPTIONS = 2;
const TCA_MIRRED_PARMS = 2;
const TC_ACT_STOLEN = 4;
const TCA_EGRESS_REDIR = 1;

const TC_H_ROOT = 0xffffffff;
const TCA_TBF_PARMS = 1;
const TCA_TBF_RATE64 = 4;
const TCA_TBF_BURST = 6;
const TC_LINKLAYER_ETHERNET = 1;

/** A new body that starts with struct tcmsg. */
function tcmsg(index: number, handle: number, parent: number, info: number): BodyWriter {
  const w = bodyWriter();
  const at = w.struct(20);
  w.i32At(at + 4, index);
  w.u32At(at + 8, handle);
  w.u32At(at + 12, parent);
  w.u32At(at + 16, info);
  return w;
}

export function ingressQdiscAdd(index: number, name: string): NetlinkRequest {
  const w = tcmsg(index, INGRESS_HANDLE, TC_H_INGRESS, 0);
  w.string(TCA_KIND, 'ingress');
  return { type: RTM_NEWQDISC, flags: NLM_F_CREATE | NLM_F_EXCL, what: `add ingress qdisc on ${name}`, body: w.take() };
}

/** Removes the ingress qdisc and the filters on it (tc qdisc del dev X ingress). */
export function ingressQdiscDel(index: number, name: string): NetlinkRequest {
  const w = tcmsg(index, INGRESS_HANDLE, TC_H_INGRESS, 0);
  return { type: RTM_DELQDISC, flags: 0, what: `delete ingress qdisc on ${name}`, body: w.take() };
}

/** Every frame arriving on `index` leaves through `target` (tc: u32 match u8 0 0 action mirred egress redirect). */
export function redirectFilterAdd(index: number, name: string, target: number, targetName: string): NetlinkRequest {
  // struct tc_u32_sel (16 bytes) with one struct tc_u32_key (16 bytes): mask 0, value 0 — matches all.
  const sel = Buffer.alloc(32);
  sel.writeUInt8(TC_U32_TERMINAL, 0);
  sel.writeUInt8(1, 2); // nkeys
  // struct tc_mirred: index, capab, action, refcnt, bindcnt, eaction, ifindex.
  const mirred = Buffer.alloc(28);
  mirred.writeInt32LE(TC_ACT_STOLEN, 8);
  mirred.writeInt32LE(TCA_EGRESS_REDIR, 20);
  mirred.writeUInt32LE(target, 24);
  const w = tcmsg(index, 0, INGRESS_HANDLE, (1 << 16) | ETH_P_ALL_BE);
  w.string(TCA_KIND, 'u32');
  const options = w.begin(TCA_OPTIONS);
  w.bytes(TCA_U32_SEL, sel);
  const actions = w.begin(TCA_U32_ACT);
  const action = w.begin(1); // the first action of the list
  w.string(TCA_ACT_KIND, 'mirred');
  const actionOptions = w.begin(TCA_ACT_OPTIONS);
  w.bytes(TCA_MIRRED_PARMS, mirred);
  w.end(actionOptions);
  w.end(action);
  w.end(actions);
  w.end(options);
  return { type: RTM_NEWTFILTER, flags: NLM_F_CREATE | NLM_F_EXCL, what: `add redirect filter ${name} → ${targetName}`, body: w.take() };
}

/**
 * A token bucket filter as the root qdisc: `rate` bytes/s, `burst` bytes, `limit` bytes queued
 * (tc qdisc add dev X root tbf rate R burst B limit L). The burst travels as TCA_TBF_BURST, so
 * no rate table is needed; rates above 4 GB/s travel as TCA_TBF_RATE64.
 */
export function tbfQdiscAdd(index: number, name: string, rate: bigint, burst: number, limit: number): NetlinkRequest {
  // struct tc_tbf_qopt: rate and peakrate (struct tc_ratespec, 12 bytes each), limit, buffer, mtu.
  const qopt = Buffer.alloc(36);
  qopt.writeUInt8(TC_LINKLAYER_ETHERNET, 1);
  qopt.writeUInt32LE(rate > 0xffffffffn ? 0xffffffff : Number(rate), 8);
  qopt.writeUInt32LE(limit, 24);
  const rate64 = Buffer.alloc(8);
  rate64.writeBigUInt64LE(rate);
  const w = tcmsg(index, 0x00010000, TC_H_ROOT, 0);
  w.string(TCA_KIND, 'tbf');
  const options = w.begin(TCA_OPTIONS);
  w.bytes(TCA_TBF_PARMS, qopt);
  if (rate > 0xffffffffn) w.bytes(TCA_TBF_RATE64, rate64);
  w.u32(TCA_TBF_BURST, burst);
  w.end(options);
  return { type: RTM_NEWQDISC, flags: NLM_F_CREATE | NLM_F_EXCL, what: `add tbf qdisc on ${name}`, body: w.take() };
}
