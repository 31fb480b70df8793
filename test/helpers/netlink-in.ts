// A netlink socket in the netns pinned at a path (a throwaway one a test made), for checks and
// set-up from outside the daemon; the caller closes it.
import fs from 'node:fs';
import { NetlinkSocket } from '../../plugin/netlink/socket';
import { socketInNetns } from '../../plugin/netns/netns';

export function netlinkIn(netnsPath: string): NetlinkSocket {
  const fd = fs.openSync(netnsPath, 'r');
  try {
    return socketInNetns(fd);
  } finally {
    fs.closeSync(fd);
  }
}
