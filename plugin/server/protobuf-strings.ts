// How protobufjs writes a string field into a Node Buffer: with Buffer's own write, always.
//
// protobufjs writes strings under 40 characters with a JavaScript loop (`util.utf8.write`:
// charCodeAt and length per character). In the daemon one copy of that loop sees every kind of
// V8 string (literals, JSON's, concatenations, slices), so its property loads go megamorphic:
// callgrind counted 23 calls a pod lifecycle costing 64,000 instructions, ≈ 140 a character,
// 9 % of the main thread's work (docs/performance-rounds.md, sixteenth round). Buffer's write is one
// call into Node whatever the string.
import protobuf from 'protobufjs';

type Utf8Write = (s: string, buf: Uint8Array, offset: number) => number;

const utf8 = protobuf.util.utf8 as { write: Utf8Write };
const jsWrite = utf8.write;

/** Bytes written, as protobufjs's own; a buffer that is not a Node Buffer (none in Node) still gets its loop. */
export const writeUtf8: Utf8Write = (s, buf, offset) => (buf instanceof Buffer ? buf.write(s, offset) : jsWrite(s, buf, offset));

utf8.write = writeUtf8;
