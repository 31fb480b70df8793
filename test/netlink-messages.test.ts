// Netlink messages as kni writes them: padding, large bodies, the attach's and the detach's
// requests byte for byte (bench/kernel-floor.c mirrors them), and a link parsed back.
import assert from 'node:assert/strict';
import { align4 } from '../plugin/netlink/attr';
import { BodyWriter, bodyWriter } from '../plugin/netlink/body-writer';
import { addrAdd } from '../plugin/netlink/addr';
import { linkSetAlias, linkSetGroup, linkSetHairpin, linkSetNoLinkLocal, linkSetUp, linkSetUpByIndex, parseLink, vethAdd } from '../plugin/netlink/link';
import { neighSet } from '../plugin/netlink/neigh';
import { defaultRouteAdd, hostRouteAdd } from '../plugin/netlink/route';
import type { NetlinkRequest } from '../plugin/netlink/socket';
import { parseIp } from '../plugin/ipam/ip';

describe('netlink attributes', () => {
  it('are padded with zeros, never with what was in a buffer before', () => {
    for (let i = 0; i < 64; i++) Buffer.allocUnsafe(64).fill(0xff); // leave garbage in Node's pool
    const one = (write: (w: BodyWriter) => void): string => {
      bodyWriter().struct(64); // and in the scratch buffer
      const w = bodyWriter();
      write(w);
      return w.take().toString('hex');
    };
    assert.equal(one((w) => w.u8(3, 7)), '0500030007000000');
    assert.equal(one((w) => w.u32(4, 0x01020304)), '0800040004030201');
    assert.equal(one((w) => w.string(3, 'eth0')), '0900030065746830' + '00000000');
    assert.equal(one((w) => w.string(1, 'abcd1234')), '0d000100' + Buffer.from('abcd1234').toString('hex') + '00000000');
    assert.equal(one((w) => w.bytes(8, Buffer.from([1, 2, 3]))), '0700080001020300');
    assert.equal(one((w) => w.mac(1, '0a:58:0A:80:3:07')), '0a0001000a580a800307' + '0000');
    assert.equal(one((w) => w.ip(1, 6, parseIp('fd00::1').value)), '14000100fd000000000000000000000000000001');
    assert.equal(one((w) => w.struct(5)), '0000000000');
    assert.equal(
      one((w) => {
        const nest = w.begin(18);
        w.u8(1, 1);
        w.string(2, 'x');
        w.end(nest);
      }),
      '1400128005000100010000000600020078000000',
    );
  });

  it('a body larger than the scratch buffer is written whole', () => {
    const w = bodyWriter();
    const long = 'x'.repeat(40_000);
    w.struct(16);
    w.string(20, long);
    w.u32(4, 9);
    const b = w.take();
    assert.equal(b.length, 16 + align4(4 + long.length + 1) + 8);
    assert.equal(b.toString('utf8', 20, 20 + long.length), long);
    assert.equal(b.readUInt32LE(b.length - 4), 9);
  });

  it('the requests of an attach and a detach keep their bytes (the kernel floor mirrors them)', () => {
    // Pinned bytes: bench/kernel-floor.c mirrors these messages, and a builder's rewrite must not change them.
    for (let i = 0; i < 64; i++) Buffer.allocUnsafe(64).fill(0xff); // leave garbage in Node's pool
    const v4 = parseIp('10.128.3.7');
    const v6 = parseIp('fd00:128::3:7');
    const built: Record<string, NetlinkRequest> = {
      vethRouted: vethAdd({ name: 'kni49075c1f2373', mac: 'ee:ee:ee:ee:ee:ee', mtu: 1500, master: 0, peer: { name: 'eth0', mac: '0a:58:0a:80:03:07', netnsFd: 23 } }),
      vethBridge: vethAdd({ name: 'kni0123456789ab', mtu: 1450, master: 5, peer: { name: 'net1', mac: '0a:58:0a:80:03:07', netnsFd: 7 } }),
      noLinkLocal: linkSetNoLinkLocal(42, 'eth0'),
      hairpin: linkSetHairpin(42, 'x'),
      alias: linkSetAlias(42, 'x', 'kni:abcdef0123'),
      upByIndex: linkSetUpByIndex(42, 'x'),
      upLo: linkSetUp('lo'),
      group: linkSetGroup('kni49075c1f2373', 0x6b6e69, 'kni-released:abc'),
      addr4: addrAdd(3, 'eth0', { ...v4, prefixLength: 32 }),
      addr6: addrAdd(3, 'eth0', { ...v6, prefixLength: 128 }, true),
      neigh4: neighSet({ family: 4, index: 3, ip: '10.128.0.1', mac: 'ee:ee:ee:ee:ee:ee' }),
      neigh6: neighSet({ family: 6, index: 3, ip: 'fd00:128::1', mac: '0a:58:0a:80:03:07' }),
      host4: hostRouteAdd(4, v4.value, 9, 'x'),
      host6: hostRouteAdd(6, v6.value, 9, 'x'),
      def4: defaultRouteAdd(4, parseIp('10.128.0.1').value, 3, 'eth0'),
      def6: defaultRouteAdd(6, parseIp('fd00:128::1').value, 3, 'eth0', 'fd00:128::1'),
    };
    const want: Record<string, [number, number, string, string]> = {
      vethRouted: [16, 1536, 'add veth kni49075c1f2373/eth0', '00000000000000000000000000000000140003006b6e69343930373563316632333733000a000100eeeeeeeeeeee000008000400dc05000008001f0001000000080020000100000060001280090001007665746800000000500002804c0001000000000000000000000000000000000009000300657468300000000008000400dc0500000a0001000a580a800307000008001c001700000008001f00010000000800200001000000'],
      vethBridge: [16, 1536, 'add veth kni0123456789ab/net1', '00000000000000000000000000000000140003006b6e693031323334353637383961620008000400aa05000008000a000500000008001f0001000000080020000100000060001280090001007665746800000000500002804c00010000000000000000000000000000000000090003006e6574310000000008000400aa0500000a0001000a580a800307000008001c000700000008001f00010000000800200001000000'],
      noLinkLocal: [16, 0, 'turn off IPv6 link-local on eth0', '000000002a000000000000000000000010001a800c000a800500080001000000'],
      hairpin: [19, 0, 'set hairpin on x', '070000002a00000000000000000000000c000c800500040001000000'],
      alias: [16, 0, 'set alias of x', '000000002a0000000000000000000000130014006b6e693a616263646566303132330000'],
      upByIndex: [16, 0, 'set x up', '000000002a0000000100000001000000'],
      upLo: [16, 0, 'set lo up', '00000000000000000100000001000000070003006c6f0000'],
      group: [16, 0, 'move kni49075c1f2373 to group 7040617', '00000000000000000000000000000000140003006b6e693439303735633166323337330008001b00696e6b00150014006b6e692d72656c65617365643a61626300000000'],
      addr4: [20, 1536, 'add address 10.128.3.7/32 to eth0', '0220000003000000080002000a800307080001000a8003070800080080000000'],
      addr6: [20, 1280, 'add address fd00:128::3:7/128 to eth0', '0a8000000300000014000200fd00012800000000000000000003000714000100fd0001280000000000000000000300070800080082000000'],
      neigh4: [28, 1280, 'set neighbour 10.128.0.1 lladdr ee:ee:ee:ee:ee:ee (link 3)', '0200000003000000800000000a000200eeeeeeeeeeee0000080001000a800001'],
      neigh6: [28, 1280, 'set neighbour fd00:128::1 lladdr 0a:58:0a:80:03:07 (link 3)', '0a00000003000000800000000a0002000a580a800307000014000100fd000128000000000000000000000001'],
      host4: [24, 1280, 'add route 10.128.3.7/32 dev x', '02200000fe03fd0100000000080001000a8003070800040009000000'],
      host6: [24, 1280, 'add route fd00:128::3:7/128 dev x', '0a800000fe03fd010000000014000100fd0001280000000000000000000300070800040009000000'],
      def4: [24, 1280, 'add default route via 10.128.0.1 dev eth0', '02000000fe03000100000000080005000a8000010800040003000000'],
      def6: [24, 1280, 'add default route via fd00:128::1 dev eth0', '0a000000fe0300010000000014000500fd0001280000000000000000000000010800040003000000'],
    };
    for (const [k, r] of Object.entries(built)) assert.deepEqual([r.type, r.flags, r.what, r.body.toString('hex')], want[k], k);
  });

  it('a link message parses to its fields, whatever other attributes come around them', () => {
    const link = (write: (w: BodyWriter) => void): Buffer => {
      const w = bodyWriter();
      const at = w.struct(16); // struct ifinfomsg
      w.i32At(at + 4, 42);
      w.u32At(at + 8, 0x1003);
      write(w);
      return w.take();
    };
    const body = link((w) => {
      w.u32(13, 7); // IFLA_TXQLEN: not a Link field
      w.string(3, 'knia1b2c3d4e5f6');
      w.u32(4, 1450);
      w.bytes(1, Buffer.from([0xee, 0xee, 0xee, 0xee, 0xee, 0xee]));
      w.u32(10, 3);
      const spec = w.begin(26); // IFLA_AF_SPEC: skipped whole
      const inet6 = w.begin(10);
      w.u8(8, 1);
      w.end(inet6);
      w.end(spec);
      w.string(20, 'kni:sandbox-1');
      w.u32(5, 9);
      w.bytes(37, Buffer.from([5, 0, 0, 0]));
      const info = w.begin(18);
      w.string(1, 'veth');
      const data = w.begin(2);
      w.u32(1, 1);
      w.end(data);
      w.end(info);
      w.string(3, 'knia1b2c3d4e5f7'); // a repeated attribute: the last one wins, as in the kernel
    });
    assert.deepEqual(parseLink(body), { index: 42, flags: 0x1003, name: 'knia1b2c3d4e5f7', mtu: 1450, mac: 'ee:ee:ee:ee:ee:ee', master: 3, kind: 'veth', alias: 'kni:sandbox-1', peerIndex: 9, peerNetnsId: 5 });
    assert.deepEqual(parseLink(link((w) => w.string(3, 'lo'))), { index: 42, flags: 0x1003, name: 'lo', mtu: 0, mac: '', master: 0, kind: '', alias: '', peerIndex: 0, peerNetnsId: -1 });
    assert.equal(parseLink(link((w) => w.bytes(1, Buffer.from([0x0a, 0x58, 0, 1, 0x0f, 0x10])))).mac, '0a:58:00:01:0f:10');
  });
});
