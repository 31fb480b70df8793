// The framing between kni-cni (runtime-hooks/cni-shim/kni-cni.c) and the daemon: a request is
// a list of key/value fields, the answer an exit code and the bytes for stdout.

/**
 * The largest request kni-cni may send: its stdin cap (1 MiB, kni-cni.c MAX_STDIN) plus the
 * environment fields. The largest network config Kubernetes can produce is far smaller: all of
 * a pod's annotations (passed in runtimeConfig) are capped at 256 KiB, and a conflist of a few
 * plugins is a few KiB.
 */
export const MAX_REQUEST = (1 << 20) + (64 << 10);

/** Parses one request (after its 4-byte length); throws on malformed input. */
export function decodeRequest(b: Buffer): Map<string, string> {
  const out = new Map<string, string>();
  let o = 0;
  const u32 = () => {
    if (o + 4 > b.length) throw new Error('truncated request');
    const v = b.readUInt32BE(o);
    o += 4;
    return v;
  };
  const str = () => {
    const n = u32();
    if (o + n > b.length) throw new Error('truncated request');
    const s = b.toString('utf8', o, o + n);
    o += n;
    return s;
  };
  const count = u32();
  if (count > 64) throw new Error(`too many fields (${count})`);
  for (let i = 0; i < count; i++) out.set(str(), str());
  if (o !== b.length) throw new Error('trailing bytes after the request');
  return out;
}

export function encodeRequest(fields: Record<string, string>): Buffer {
  const parts: Buffer[] = [];
  const u32 = (v: number) => {
    const x = Buffer.alloc(4);
    x.writeUInt32BE(v);
    parts.push(x);
  };
  const entries = Object.entries(fields);
  u32(entries.length);
  for (const [k, v] of entries) {
    for (const s of [k, v]) {
      const b = Buffer.from(s);
      u32(b.length);
      parts.push(b);
    }
  }
  const body = Buffer.concat(parts);
  const len = Buffer.alloc(4);
  len.writeUInt32BE(body.length);
  return Buffer.concat([len, body]);
}

export function encodeResponse(exitCode: number, output: string): Buffer {
  const out = Buffer.from(output);
  const head = Buffer.alloc(8);
  head.writeUInt32BE(exitCode, 0);
  head.writeUInt32BE(out.length, 4);
  return Buffer.concat([head, out]);
}
