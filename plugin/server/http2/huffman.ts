// HPACK's Huffman code (RFC 7541, appendix B), decoding only: kni's answers are written as plain
// literals, but clients (grpc-go, nghttp2 under Node) Huffman-encode what they send.
//
// The code is canonical: within one length, codes rise with the symbol, and each length's
// first code follows the previous length's last. So the 257 code lengths are the whole table;
// they are written below one per symbol, as a base-32 digit (symbol 256 is EOS).

const LENGTHS =
  'dnsssssssoussussssssssusssssssss6aacd68baa8b8666555666666678f6cad67777777777777777777777878djde6f56565666577666567655677777fbedskmkkmmmnmnnnnnonoomnonnnnlmnmnnomlkmmnnlnmmolmnnllmlnmnnkmmmnmmnqqkjmnmpqqqrrqopjlqrrqrollqqsrrrkoklmllnmmppooqnqrqqrrrrrsrrrrrqu';
const EOS = 256;
const MAX_LEN = 30;

/** Per code length: the first code, how many codes, and where its symbols start in `symbols`. */
const first = new Int32Array(MAX_LEN + 2);
const count = new Int32Array(MAX_LEN + 2);
const start = new Int32Array(MAX_LEN + 2);
const symbols = new Uint16Array(257);

{
  const lens = Array.from(LENGTHS, (c) => parseInt(c, 32));
  for (const l of lens) count[l]++;
  let code = 0;
  let at = 0;
  for (let l = 1; l <= MAX_LEN; l++) {
    first[l] = code;
    start[l] = at;
    at += count[l];
    code = (code + count[l]) << 1;
  }
  const filled = new Int32Array(MAX_LEN + 2);
  for (let s = 0; s < lens.length; s++) symbols[start[lens[s]] + filled[lens[s]]++] = s;
}

export class HuffmanError extends Error {}

/** The bytes a Huffman-coded string stands for, as a latin1 string (header bytes as they are). */
export function huffmanDecode(src: Buffer, from: number, to: number): string {
  const out: number[] = [];
  let code = 0;
  let len = 0;
  for (let i = from; i < to; i++) {
    const byte = src[i];
    for (let bit = 7; bit >= 0; bit--) {
      code = (code << 1) | ((byte >> bit) & 1);
      len++;
      const k = code - first[len];
      if (k >= 0 && k < count[len]) {
        const s = symbols[start[len] + k];
        if (s === EOS) throw new HuffmanError('Huffman string holds EOS');
        out.push(s);
        code = 0;
        len = 0;
      } else if (len >= MAX_LEN) {
        throw new HuffmanError('Huffman code longer than any symbol');
      }
    }
  }
  // What is left must be padding: fewer than 8 bits, all ones (the start of EOS).
  if (len > 7 || code !== (1 << len) - 1) throw new HuffmanError('Huffman string badly padded');
  return Buffer.from(out).toString('latin1');
}
