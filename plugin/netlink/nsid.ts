// Network namespace ids (RTM_GETNSID): the number the node netns knows another netns by, as
// veths report their peer's netns (IFLA_LINK_NETNSID).
import { parseAttrs } from './attr';
import { bodyWriter } from './body-writer';
import { NetlinkSocket } from './socket';

const RTM_NEWNSID = 88;
const RTM_GETNSID = 90;
const NETNSA_NSID = 1;
const NETNSA_FD = 3;

/** The nsid the socket's netns has for the netns open on fd; -1 when it has none. */
export function nsidOf(sock: NetlinkSocket, netnsFd: number): number {
  const w = bodyWriter();
  w.struct(4); // struct rtgenmsg: one byte of family, padded to 4
  w.u32(NETNSA_FD, netnsFd);
  const msgs = sock.query({ type: RTM_GETNSID, flags: 0, body: w.take(), what: 'get netns id' });
  const m = msgs.find((x) => x.type === RTM_NEWNSID);
  return m ? (parseAttrs(m.body, 4).get(NETNSA_NSID)?.readInt32LE(0) ?? -1) : -1;
}
