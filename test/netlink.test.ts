// kni's rtnetlink socket on the real kernel, in a throwaway netns: a batch asks an ack of its
// last request only, yet every failure in it is still reported; a new link is announced back
// (NLM_F_ECHO) with both ends of a veth.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { linkByName, linkCreate, linkSetAlias, linkSetUp, vethAdd } from '../plugin/netlink/link';
import { NetlinkError, NetlinkSocket } from '../plugin/netlink/socket';
import { netlinkIn } from './helpers/netlink-in';
import { RUN, sh, trySh } from './helpers/sh';

describe('netlink socket (real kernel)', () => {
  const ns = `${RUN}-nl`;
  const nsB = `${RUN}-nlb`;
  let sock: NetlinkSocket;

  before(() => {
    sh('ip', ['netns', 'add', ns]);
    sh('ip', ['netns', 'add', nsB]);
    sock = netlinkIn(`/run/netns/${ns}`);
  });
  after(() => {
    sock?.close();
    trySh('ip', ['netns', 'del', ns]);
    trySh('ip', ['netns', 'del', nsB]);
  });

  it('a batch reports the failure of a middle request, and runs the rest', () => {
    sh('ip', ['-n', ns, 'link', 'add', 'nla', 'type', 'bridge']);
    let err: unknown;
    try {
      sock.exec([linkSetAlias(linkByName(sock, 'nla')!.index, 'nla', 'first'), linkSetUp('no-such-link'), linkSetUp('nla')]);
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof NetlinkError, `expected a NetlinkError, got ${String(err)}`);
    assert.equal(err.code, 'ENODEV');
    assert.match(err.message, /set no-such-link up/);
    const after = linkByName(sock, 'nla')!;
    assert.equal(after.alias, 'first');
    assert.equal(after.flags & 1, 1, 'the request after the failing one did not run');
  });

  it('a batch that succeeds answers once its last request is done; a failing last request is thrown', () => {
    sh('ip', ['-n', ns, 'link', 'add', 'nlb', 'type', 'bridge']);
    sock.exec([linkSetUp('nlb'), linkSetAlias(linkByName(sock, 'nlb')!.index, 'nlb', 'kni:x')]);
    assert.equal(linkByName(sock, 'nlb')?.alias, 'kni:x');
    assert.throws(() => sock.exec([linkSetUp('nlb'), linkSetUp('nope')]), /set nope up: ENODEV/);
    // The socket is still in step: the next request gets its own answer.
    sock.exec([linkSetUp('nlb')]);
  });

  it('a new veth is announced back with its peer\'s ifindex in the other netns', () => {
    const fdB = fs.openSync(`/run/netns/${nsB}`, 'r');
    try {
      const req = vethAdd({ name: 'nlv', mac: 'ee:ee:ee:ee:ee:ee', mtu: 1400, master: 0, peer: { name: 'eth0', mac: '0a:58:0a:00:00:07', netnsFd: fdB } });
      const created = linkCreate(sock, req, 'nlv');
      assert.ok(created, 'the kernel announced nothing (Linux 6.3 or later echoes a new link)');
      assert.equal(created.index, linkByName(sock, 'nlv')?.index);
      assert.equal(created.mac, 'ee:ee:ee:ee:ee:ee');
      const peer = sh('ip', ['-n', nsB, '-o', 'link', 'show', 'eth0']);
      assert.match(peer, new RegExp(`^${created.peerIndex}: eth0@`));
      assert.throws(() => linkCreate(sock, req, 'nlv'), (e: unknown) => e instanceof NetlinkError && e.code === 'EEXIST');
    } finally {
      fs.closeSync(fdB);
    }
  });
});
