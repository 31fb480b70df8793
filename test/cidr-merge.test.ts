// The masquerade chain's CIDRs merged (plugin/ipam/cidr-merge.ts): the fewest CIDRs covering
// exactly what the list covers, checked address by address on random lists (fast-check).
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { mergeCidrs } from '../plugin/ipam/cidr-merge';
import { Cidr, cidrContains, parseCidr } from '../plugin/ipam/ip';

const texts = (l: Cidr[]): string[] => l.map((c) => c.text);

describe('merging CIDRs (the masquerade chain)', () => {
  it('blocks handed out in order merge into a few; a gap costs a few more; inner ones go; the families stay apart', () => {
    const blocks = Array.from({ length: 5000 }, (_, i) => parseCidr(`10.${(i >> 8) + 100}.${i & 255}.0/24`));
    assert.ok(mergeCidrs(blocks).length <= 8, texts(mergeCidrs(blocks)).join(' '));
    assert.deepEqual(texts(mergeCidrs(['10.0.1.0/24', '10.0.2.0/24', '10.0.3.0/24'].map(parseCidr))), ['10.0.1.0/24', '10.0.2.0/23']);
    assert.deepEqual(texts(mergeCidrs(['10.0.0.0/24', '10.0.0.128/25', '10.0.1.0/24', 'fd00::/65', 'fd00::8000:0:0:0/65'].map(parseCidr))), ['10.0.0.0/23', 'fd00::/64']);
    assert.deepEqual(texts(mergeCidrs(['0.0.0.0/0', '10.0.0.0/8'].map(parseCidr))), ['0.0.0.0/0']);
    assert.deepEqual(mergeCidrs([]), []);
  });

  it('any list: the merged CIDRs hold exactly the addresses the list holds, and no two of them merge further', () => {
    // A /20 space, CIDRs from /20 to /28 in it: small enough to check every address.
    const cidr = fc.tuple(fc.integer({ min: 20, max: 28 }), fc.integer({ min: 0, max: 4095 })).map(([len, off]) => parseCidr(`10.1.${16 + (off >> 8)}.${off & 255}/${len}`));
    fc.assert(
      fc.property(fc.array(cidr, { maxLength: 40 }), (list) => {
        const merged = mergeCidrs(list);
        for (let a = 0; a < 4096; a++) {
          const v = (10n << 24n) | (1n << 16n) | (BigInt(16 + (a >> 8)) << 8n) | BigInt(a & 255);
          const inList = list.some((c) => cidrContains(c, 4, v));
          const inMerged = merged.some((c) => cidrContains(c, 4, v));
          if (inList !== inMerged) return false;
        }
        const again = mergeCidrs(merged);
        return again.length === merged.length;
      }),
      { numRuns: 200 },
    );
  });
});
