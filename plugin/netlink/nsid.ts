// Network namespace ids (RTM_GETNSID): the number the node netns knows another netns by, as
// veths report their peer's netns (IFLA_LINK_NETNSID).
import { attrU32, parseAttrs } from './attr';
import { NetlinkSocket } from './socket';

const RTM_NEWNSID = 88;
const RTM_GETNSID = 90;
const NETNSA_NSID = 1;
const NETNSA_FD = 3;

/** The nsid the socket's netns has for the netns open on fd; -1 when it has none. */
export function nsidOf(sock: NetlinkSocket, netnsFd: number): number {
  // struct rtgenmsg is one byte of family, padded to 4.
  const body = Buffer.concat([Buffer.alloc(4), attrU32(NETNSA_FD, netnsFd)]);
  const msgs = sock.query({ type: RTM_GETNSID, flags: 0, body, what: 'get netns id' });
  const m = msgs.find((x) => x.type === RTM_NEWNSID);
  return m ? (parseAttrs(m.body, 4).get(NETNSA_NSID)?.readInt32LE(0) ?? -1) : -1;
}
