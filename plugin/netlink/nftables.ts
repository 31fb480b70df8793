// nftables' tables (NFT_MSG_GETTABLE over nfnetlink), read only: which tables the node has, so
// kni can say when another firewall's rules stand in the pods' way (plugin/node/host-firewall.ts).
// kni writes its own rules through the iptables commands (plugin/node/iptables.ts); this is one
// dump, at setup and at each reconcile, with no process spawned for it.
import { parseAttrs, readString } from './attr';
import { NETLINK_NETFILTER, NetlinkSocket } from './socket';

const NFNL_SUBSYS_NFTABLES = 10;
const NFT_MSG_NEWTABLE = 0;
const NFT_MSG_GETTABLE = 1;
const NFTA_TABLE_NAME = 1;
/** nfgenmsg's family: every family (the dump's), and each table's as nft names it. */
const NFPROTO_UNSPEC = 0;
const FAMILIES: Record<number, string> = { 1: 'inet', 2: 'ip', 3: 'arp', 5: 'netdev', 7: 'bridge', 10: 'ip6' };

export interface NftTable {
  family: string;
  name: string;
}

/** Every nftables table of the calling thread's netns. */
export function nftTables(): NftTable[] {
  const sock = new NetlinkSocket(NETLINK_NETFILTER);
  try {
    // struct nfgenmsg: family, version (NFNETLINK_V0), resource id (big-endian; 0).
    const body = Buffer.alloc(4);
    body.writeUInt8(NFPROTO_UNSPEC, 0);
    const msgs = sock.dump((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE, body, 'list nftables tables');
    return msgs
      .filter((m) => m.type === ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE) && m.body.length >= 4)
      .map((m) => {
        const name = parseAttrs(m.body, 4).get(NFTA_TABLE_NAME);
        return { family: FAMILIES[m.body.readUInt8(0)] ?? `family ${m.body.readUInt8(0)}`, name: name ? readString(name) : '' };
      });
  } finally {
    sock.close();
  }
}
