// HPACK (RFC 7541): the decoder of the header blocks a client sends, with its dynamic table,
// and the encoder of kni's answers. kni encodes statelessly — static-table names, literals never
// added to the peer's table — so a peer's table size setting never changes what it sends.
import { huffmanDecode } from './huffman';

export type HeaderList = [name: string, value: string][];

const STATIC: [string, string][] = [
  [':authority', ''], [':method', 'GET'], [':method', 'POST'], [':path', '/'], [':path', '/index.html'],
  [':scheme', 'http'], [':scheme', 'https'], [':status', '200'], [':status', '204'], [':status', '206'],
  [':status', '304'], [':status', '400'], [':status', '404'], [':status', '500'], ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'], ['accept-language', ''], ['accept-ranges', ''], ['accept', ''],
  ['access-control-allow-origin', ''], ['age', ''], ['allow', ''], ['authorization', ''], ['cache-control', ''],
  ['content-disposition', ''], ['content-encoding', ''], ['content-language', ''], ['content-length', ''],
  ['content-location', ''], ['content-range', ''], ['content-type', ''], ['cookie', ''], ['date', ''], ['etag', ''],
  ['expect', ''], ['expires', ''], ['from', ''], ['host', ''], ['if-match', ''], ['if-modified-since', ''],
  ['if-none-match', ''], ['if-range', ''], ['if-unmodified-since', ''], ['last-modified', ''], ['link', ''],
  ['location', ''], ['max-forwards', ''], ['proxy-authenticate', ''], ['proxy-authorization', ''], ['range', ''],
  ['referer', ''], ['refresh', ''], ['retry-after', ''], ['server', ''], ['set-cookie', ''],
  ['strict-transport-security', ''], ['transfer-encoding', ''], ['user-agent', ''], ['vary', ''], ['via', ''],
  ['www-authenticate', ''],
];
/** Per RFC 7541 §4.1, an entry's size is its name and value octets plus 32. */
const ENTRY_OVERHEAD = 32;

export class HpackError extends Error {}

/** One connection's decoder: its dynamic table outlives each header block. */
export class HpackDecoder {
  private table: [string, string][] = []; // newest first
  private size = 0;
  private max: number;

  /** `limit`: the table size this end announced (SETTINGS_HEADER_TABLE_SIZE). */
  constructor(private readonly limit = 4096) {
    this.max = limit;
  }

  /**
   * The fields of one whole header block. `maxListSize` bounds what is returned (names, values
   * and 32 per field); past it the block is still decoded, to keep the table in step, and
   * `oversized` is set.
   */
  decode(block: Buffer, maxListSize: number): { headers: HeaderList; oversized: boolean } {
    const headers: HeaderList = [];
    let listSize = 0;
    let oversized = false;
    let pos = 0;
    let fieldSeen = false;
    const int = (prefixBits: number): number => {
      const mask = (1 << prefixBits) - 1;
      let v = block[pos++] & mask;
      if (v < mask) return v;
      for (let shift = 0; ; shift += 7) {
        if (pos >= block.length) throw new HpackError('header block ends inside an integer');
        if (shift > 21) throw new HpackError('integer too large');
        const b = block[pos++];
        v += (b & 0x7f) * 2 ** shift;
        if (!(b & 0x80)) return v;
      }
    };
    const str = (): string => {
      if (pos >= block.length) throw new HpackError('header block ends before a string');
      const huffman = (block[pos] & 0x80) !== 0;
      const n = int(7);
      if (pos + n > block.length) throw new HpackError('string runs past the header block');
      const s = huffman ? huffmanDecode(block, pos, pos + n) : block.toString('latin1', pos, pos + n);
      pos += n;
      return s;
    };
    const entry = (index: number): [string, string] => {
      if (index === 0) throw new HpackError('index 0');
      if (index <= STATIC.length) return STATIC[index - 1];
      const e = this.table[index - STATIC.length - 1];
      if (!e) throw new HpackError(`index ${index} beyond the tables`);
      return e;
    };
    const emit = (name: string, value: string): void => {
      fieldSeen = true;
      listSize += name.length + value.length + ENTRY_OVERHEAD;
      if (listSize > maxListSize) oversized = true;
      else headers.push([name, value]);
    };
    while (pos < block.length) {
      const b = block[pos];
      if (b & 0x80) {
        const [name, value] = entry(int(7));
        emit(name, value);
      } else if (b & 0x40) {
        const nameIndex = int(6);
        const name = nameIndex ? entry(nameIndex)[0] : str();
        const value = str();
        this.add(name, value);
        emit(name, value);
      } else if (b & 0x20) {
        // Only before the block's first field (RFC 7541 §4.2), never above what we announced.
        if (fieldSeen) throw new HpackError('table size update after a field');
        const max = int(5);
        if (max > this.limit) throw new HpackError(`table size update to ${max}, above ${this.limit}`);
        this.max = max;
        this.evict(0);
      } else {
        const nameIndex = int(4); // without indexing (0000) and never indexed (0001) alike
        const name = nameIndex ? entry(nameIndex)[0] : str();
        emit(name, str());
      }
    }
    return { headers, oversized };
  }

  private add(name: string, value: string): void {
    const size = name.length + value.length + ENTRY_OVERHEAD;
    this.evict(size);
    if (size > this.max) return; // an entry larger than the table empties it and is not kept
    this.table.unshift([name, value]);
    this.size += size;
  }

  private evict(room: number): void {
    while (this.table.length && this.size + room > this.max) {
      const [n, v] = this.table.pop()!;
      this.size -= n.length + v.length + ENTRY_OVERHEAD;
    }
  }
}

function writeInt(out: number[], prefixBits: number, flags: number, v: number): void {
  const mask = (1 << prefixBits) - 1;
  if (v < mask) {
    out.push(flags | v);
    return;
  }
  out.push(flags | mask);
  v -= mask;
  while (v >= 0x80) {
    out.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
}

/** The blocks of frozen header lists (every answer's headers, the OK trailers), made once. */
const encoded = new WeakMap<HeaderList, Buffer>();

/**
 * A header block of literal fields, never indexed by the peer. A name in the static table is sent
 * by its index; `:status: 200` is the single byte of its static entry.
 */
export function encodeHeaders(fields: HeaderList): Buffer {
  const known = encoded.get(fields);
  if (known) return known;
  const out: number[] = [];
  for (const [name, value] of fields) {
    if (name === ':status' && value === '200') {
      out.push(0x88);
      continue;
    }
    const nameIndex = STATIC.findIndex(([n]) => n === name) + 1;
    writeInt(out, 4, 0x00, nameIndex);
    if (!nameIndex) {
      writeInt(out, 7, 0, name.length);
      for (let i = 0; i < name.length; i++) out.push(name.charCodeAt(i) & 0xff);
    }
    writeInt(out, 7, 0, Buffer.byteLength(value, 'latin1'));
    for (let i = 0; i < value.length; i++) out.push(value.charCodeAt(i) & 0xff);
  }
  const block = Buffer.from(out);
  if (Object.isFrozen(fields)) encoded.set(fields, block);
  return block;
}
