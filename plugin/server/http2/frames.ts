// HTTP/2's frames (RFC 9113 §4 and §6): the type and flag numbers, settings, error codes, and
// the writer of one frame.

export const FRAME = {
  DATA: 0, HEADERS: 1, PRIORITY: 2, RST_STREAM: 3, SETTINGS: 4, PUSH_PROMISE: 5, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8, CONTINUATION: 9,
} as const;

export const FLAG = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

export const SETTING = {
  HEADER_TABLE_SIZE: 1, ENABLE_PUSH: 2, MAX_CONCURRENT_STREAMS: 3, INITIAL_WINDOW_SIZE: 4, MAX_FRAME_SIZE: 5, MAX_HEADER_LIST_SIZE: 6,
} as const;

export const H2_ERROR = {
  NO_ERROR: 0, PROTOCOL_ERROR: 1, INTERNAL_ERROR: 2, FLOW_CONTROL_ERROR: 3, STREAM_CLOSED: 5, FRAME_SIZE_ERROR: 6,
  REFUSED_STREAM: 7, CANCEL: 8, COMPRESSION_ERROR: 9, ENHANCE_YOUR_CALM: 11,
} as const;

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
export const FRAME_HEADER = 9;
export const DEFAULT_WINDOW = 65_535;
export const DEFAULT_MAX_FRAME = 16_384;
export const MAX_WINDOW = 2 ** 31 - 1;

/** One frame: the 9-byte header, then the payload's parts. */
export function frame(type: number, flags: number, stream: number, ...payload: Buffer[]): Buffer {
  let len = 0;
  for (const p of payload) len += p.length;
  const out = Buffer.allocUnsafe(FRAME_HEADER + len);
  out[0] = len >>> 16;
  out[1] = (len >>> 8) & 0xff;
  out[2] = len & 0xff;
  out[3] = type;
  out[4] = flags;
  out.writeUInt32BE(stream, 5);
  let at = FRAME_HEADER;
  for (const p of payload) at += p.copy(out, at);
  return out;
}

/** A fault that ends the whole connection with a GOAWAY carrying `code`. */
export class ConnectionError extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
  }
}

/** The payload without its padding (and, for HEADERS, without the priority fields). */
export function unpad(flags: number, p: Buffer, priorityFields: boolean): Buffer {
  let from = 0;
  let to = p.length;
  if (flags & FLAG.PADDED) {
    if (!p.length) throw new ConnectionError(H2_ERROR.FRAME_SIZE_ERROR, 'padded frame without its pad length');
    to -= p[0];
    from = 1;
  }
  if (priorityFields) from += 5;
  if (to < from) throw new ConnectionError(H2_ERROR.PROTOCOL_ERROR, 'padding longer than the frame');
  return p.subarray(from, to);
}

export function u32(v: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(v >>> 0);
  return b;
}

export function settingsPayload(settings: [id: number, value: number][]): Buffer {
  const b = Buffer.allocUnsafe(settings.length * 6);
  settings.forEach(([id, v], i) => {
    b.writeUInt16BE(id, i * 6);
    b.writeUInt32BE(v, i * 6 + 2);
  });
  return b;
}

export function goawayPayload(lastStream: number, code: number, debug = ''): Buffer {
  return Buffer.concat([u32(lastStream), u32(code), Buffer.from(debug)]);
}
