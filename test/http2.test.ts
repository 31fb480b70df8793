// kni's own HTTP/2 (plugin/server/http2): HPACK against RFC 7541's examples and bad strings;
// the connection against Node's HTTP/2 client (nghttp2: Huffman strings, a dynamic table) and
// against bytes written by hand where a client would never go wrong.
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net from 'node:net';
import path from 'node:path';
import fc from 'fast-check';
import { H2Connection } from '../plugin/server/http2/connection';
import { FLAG, FRAME, H2_ERROR, PREFACE, frame } from '../plugin/server/http2/frames';
import { HpackDecoder, encodeHeaders } from '../plugin/server/http2/hpack';
import { huffmanDecode } from '../plugin/server/http2/huffman';
import { H2_TEST_LIMITS as LIMITS, socketDir } from './helpers/h2-test-server';

const hex = (s: string) => Buffer.from(s.replace(/\s/g, ''), 'hex');

interface Frame { type: number; flags: number; id: number; payload: Buffer }

/** Hands on each whole frame a raw client's socket receives from the server. */
function onFrames(c: net.Socket, handle: (f: Frame) => void): void {
  let buf = Buffer.alloc(0);
  c.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 9 && buf.length >= 9 + buf.readUIntBE(0, 3)) {
      const len = buf.readUIntBE(0, 3);
      const f = { type: buf[3], flags: buf[4], id: buf.readUInt32BE(5) & 0x7fffffff, payload: buf.subarray(9, 9 + len) };
      buf = buf.subarray(9 + len);
      handle(f);
    }
  });
}


describe('HTTP/2: HPACK', () => {
  it('decodes RFC 7541 C.3 and C.4 (three requests on one table, plain and Huffman strings)', () => {
    for (const blocks of [
      ['828684410f7777772e6578616d706c652e636f6d', '828684be58086e6f2d6361636865', '828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565'],
      ['828684418cf1e3c2e5f23a6ba0ab90f4ff', '828684be5886a8eb10649cbf', '828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf'],
    ]) {
      const d = new HpackDecoder();
      const got = blocks.map((b) => d.decode(hex(b), 1 << 16).headers);
      assert.deepEqual(got[0], [[':method', 'GET'], [':scheme', 'http'], [':path', '/'], [':authority', 'www.example.com']]);
      assert.deepEqual(got[1], [[':method', 'GET'], [':scheme', 'http'], [':path', '/'], [':authority', 'www.example.com'], ['cache-control', 'no-cache']]);
      assert.deepEqual(got[2], [[':method', 'GET'], [':scheme', 'https'], [':path', '/index.html'], [':authority', 'www.example.com'], ['custom-key', 'custom-value']]);
    }
  });

  it('refuses EOS inside a Huffman string, padding that is not ones or is 8 bits or more, an index past the tables, a table larger than announced', () => {
    assert.equal(huffmanDecode(hex('f1e3c2e5f23a6ba0ab90f4ff'), 0, 12), 'www.example.com');
    assert.throws(() => huffmanDecode(hex('fffffffc'), 0, 4), /EOS/); // 30 ones, then padding
    assert.throws(() => huffmanDecode(hex('00'), 0, 1), /padded/); // '0' then three zero bits
    assert.throws(() => huffmanDecode(hex('1fff'), 0, 2), /padded/); // 'a' then 11 bits of ones
    assert.throws(() => new HpackDecoder().decode(hex('be'), 1 << 16), /beyond the tables/);
    assert.throws(() => new HpackDecoder().decode(hex('3fe21f'), 1 << 16), /above 4096/);
    assert.throws(() => new HpackDecoder().decode(hex('8220'), 1 << 16), /after a field/);
  });

  it('what it encodes decodes to the same fields (long values, names outside the static table)', () => {
    fc.assert(fc.property(fc.array(fc.tuple(fc.constantFrom('grpc-status', 'grpc-message', 'content-type', ':status', 'x-a'), fc.string({ maxLength: 300 }).map((s) => Buffer.from(s).toString('latin1')))), (fields) => {
      assert.deepEqual(new HpackDecoder().decode(encodeHeaders(fields), 1 << 20).headers, fields);
    }));
  });
});

describe('HTTP/2: the connection, against a real client and hand-written bytes', () => {
  const { dir, servers: sockets } = socketDir('kni-h2-');

  /** A server answering each request with its request headers echoed as trailers. */
  async function echoHeadersServer(): Promise<string> {
    const sock = path.join(dir, `echo-${sockets.length}.sock`);
    const srv = net.createServer((c) => new H2Connection(c, (s) => {
      s.onEnd = () => {
        s.respond([[':status', '200']]);
        s.write(Buffer.from('ok'));
        s.end(s.headers.filter(([n]) => n.startsWith('x-')).map(([n, v]) => [`echo-${n}`, v]));
      };
    }, LIMITS));
    sockets.push(srv);
    await new Promise<void>((r) => srv.listen(sock, r));
    return sock;
  }

  it("Node's HTTP/2 client (Huffman, a dynamic table that evicts) sends random headers over one connection; each comes back intact", async function () {
    this.timeout(60_000);
    const sock = await echoHeadersServer();
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(sock) });
    try {
      const value = fc.stringMatching(/^[\x21-\x7e]([\x20-\x7e]{0,600}[\x21-\x7e])?$/);
      await fc.assert(fc.asyncProperty(fc.dictionary(fc.stringMatching(/^x-[a-z0-9-]{1,30}$/), value, { maxKeys: 8 }), async (hdrs) => {
        const got = await new Promise<Record<string, unknown>>((resolve, reject) => {
          const req = session.request({ ':method': 'POST', ':path': '/x', ...hdrs });
          req.on('trailers', (t) => resolve(t));
          req.on('error', reject);
          req.resume();
          req.end('hello');
        });
        for (const [k, v] of Object.entries(hdrs)) assert.equal(got[`echo-${k}`], v, k);
      }), { numRuns: 300 });
    } finally {
      session.close();
    }
  });

  /** Writes bytes to a fresh connection; resolves with the GOAWAY's error code and debug text. */
  async function goawayFor(bytes: Buffer): Promise<{ code: number; debug: string }> {
    const sock = await echoHeadersServer();
    return new Promise((resolve, reject) => {
      const c = net.connect(sock, () => c.write(bytes));
      onFrames(c, (f) => {
        if (f.type !== FRAME.GOAWAY) return;
        c.destroy();
        resolve({ code: f.payload.readUInt32BE(4), debug: f.payload.toString('latin1', 8) });
      });
      c.on('error', reject);
      c.on('close', () => reject(new Error('closed without GOAWAY')));
    });
  }

  it('protocol errors end the connection with a GOAWAY naming them: a bad preface, a frame over 16 KiB, a bad Huffman string, DATA on a stream never opened', async () => {
    const headers = (block: Buffer) => frame(FRAME.HEADERS, FLAG.END_HEADERS, 1, block);
    const cases: [Buffer, number, RegExp][] = [
      [Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'), H2_ERROR.PROTOCOL_ERROR, /preface/],
      [Buffer.concat([PREFACE, frame(FRAME.DATA, 0, 1, Buffer.alloc(20_000))]), H2_ERROR.FRAME_SIZE_ERROR, /20000 bytes/],
      [Buffer.concat([PREFACE, headers(hex('8386 04 84 ffffffff'))]), H2_ERROR.COMPRESSION_ERROR, /Huffman/],
      [Buffer.concat([PREFACE, frame(FRAME.DATA, 0, 7, Buffer.from('x'))]), H2_ERROR.PROTOCOL_ERROR, /idle stream 7/],
      [Buffer.concat([PREFACE, frame(FRAME.PING, 0, 0, Buffer.alloc(3))]), H2_ERROR.FRAME_SIZE_ERROR, /PING/],
    ];
    for (const [bytes, code, debug] of cases) {
      const g = await goawayFor(bytes);
      assert.equal(g.code, code, `${g.debug}`);
      assert.match(g.debug, debug);
    }
  });

  it('a client whose header table is 0 bytes gets a size update first, and its answers decode', async () => {
    const sock = await echoHeadersServer();
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(sock), settings: { headerTableSize: 0 } });
    try {
      for (let i = 0; i < 3; i++) {
        const t = await new Promise<Record<string, unknown>>((resolve, reject) => {
          const req = session.request({ ':method': 'POST', ':path': '/x', 'x-n': String(i) });
          req.on('trailers', resolve);
          req.on('error', reject);
          req.resume();
          req.end();
        });
        assert.equal(t['echo-x-n'], String(i));
      }
    } finally {
      session.close();
    }
  });

  it('a PING is acked at once on an idle connection; with a call open, its ack leaves with the answer, ahead of it, or alone when the answer is slow', async () => {
    const sock = path.join(dir, 'ping.sock');
    let release: (() => void) | undefined;
    // The server's socket writes: each wakes the client once.
    const writes: Buffer[] = [];
    const srv = net.createServer((c) => new H2Connection(Object.assign(c, {
      write: (chunk: Buffer) => {
        writes.push(Buffer.from(chunk));
        return net.Socket.prototype.write.call(c, chunk);
      },
    }), (s) => {
      s.onEnd = () => {
        const answer = () => {
          s.respond([[':status', '200']]);
          s.write(Buffer.from('ok'));
          s.end([['x-done', 'yes']]);
        };
        if (s.header(':path') === '/held') release = answer;
        else setImmediate(answer);
      };
    }, LIMITS));
    sockets.push(srv);
    await new Promise<void>((r) => srv.listen(sock, r));
    const got: Frame[] = [];
    const waiting: { test: (f: Frame) => boolean; resolve: (f: Frame) => void }[] = [];
    const next = (test: (f: Frame) => boolean) => new Promise<Frame>((resolve) => {
      const f = got.find(test);
      if (f) resolve(f);
      else waiting.push({ test, resolve });
    });
    const c = net.connect(sock);
    try {
      onFrames(c, (f) => {
        got.push(f);
        for (const w of waiting.filter((x) => x.test(f))) {
          waiting.splice(waiting.indexOf(w), 1);
          w.resolve(f);
        }
      });
      const ping = (data: string) => frame(FRAME.PING, 0, 0, Buffer.from(data));
      const ackBytes = (data: string) => frame(FRAME.PING, FLAG.ACK, 0, Buffer.from(data));
      const ackOf = (data: string) => (f: Frame) => f.type === FRAME.PING && (f.flags & FLAG.ACK) !== 0 && f.payload.toString() === data;
      const request = (id: number, p: string) => frame(FRAME.HEADERS, FLAG.END_HEADERS | FLAG.END_STREAM, id, encodeHeaders([[':method', 'POST'], [':scheme', 'http'], [':authority', 'x'], [':path', p]]));
      const answerOf = (id: number) => (f: Frame) => f.type === FRAME.HEADERS && f.id === id && (f.flags & FLAG.END_STREAM) === 0;

      c.write(Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0), ping('idle....')]));
      await next(ackOf('idle....'));

      // As grpc-go sends it: the ping for the last answer, then the next request, in one write.
      c.write(Buffer.concat([ping('withcall'), request(1, '/x')]));
      await Promise.all([next(ackOf('withcall')), next(answerOf(1))]);
      const carrier = writes.find((w) => w.includes(ackBytes('withcall')));
      assert.ok(carrier, 'no write carried the ack');
      assert.ok(carrier.subarray(0, 17).equals(ackBytes('withcall')), 'the ack did not lead its write');
      assert.equal(carrier[17 + 3], FRAME.HEADERS, "the answer's HEADERS did not follow the ack in its write");
      assert.equal(carrier.readUInt32BE(17 + 5), 1);

      c.write(Buffer.concat([ping('slowcall'), request(3, '/held')]));
      await next(ackOf('slowcall'));
      assert.ok(release, 'the held call was not started');
      assert.ok(!got.some(answerOf(3)), 'the held call was answered');
      release();
      await next((f) => f.type === FRAME.HEADERS && f.id === 3 && (f.flags & FLAG.END_STREAM) !== 0);
    } finally {
      c.destroy();
    }
  });

  it('an idle connection is sent away (GOAWAY, then closed); an old one too, after its grace, even with a stream open', async function () {
    this.timeout(20_000);
    const sock = path.join(dir, 'limits.sock');
    const srv = net.createServer((c) => new H2Connection(c, (s) => {
      s.onEnd = () => (s.header(':path') === '/hang' ? undefined : s.respond([[':status', '200']], true));
    }, { ...LIMITS, idleMs: 300, maxAgeMs: 1500, maxAgeGraceMs: 500 }));
    sockets.push(srv);
    await new Promise<void>((r) => srv.listen(sock, r));
    const connect = () => {
      const session = http2.connect('http://localhost', { createConnection: () => net.connect(sock) });
      session.on('error', () => undefined);
      const goaway = new Promise<number>((resolve) => session.on('goaway', (code) => resolve(code)));
      const closed = new Promise<number>((resolve) => session.on('close', () => resolve(Date.now())));
      return { session, goaway, closed };
    };
    const idle = connect();
    const t0 = Date.now();
    await new Promise<void>((resolve, reject) => {
      const req = idle.session.request({ ':method': 'POST', ':path': '/x' });
      req.on('response', () => resolve());
      req.on('error', reject);
      req.end();
    });
    assert.equal(await idle.goaway, H2_ERROR.NO_ERROR);
    assert.ok((await idle.closed) - t0 >= 250, 'closed before the idle time');
    const old = connect();
    const t1 = Date.now();
    const hung = old.session.request({ ':method': 'POST', ':path': '/hang' });
    hung.on('error', () => undefined);
    hung.end();
    assert.equal(await old.goaway, H2_ERROR.NO_ERROR);
    const closedAt = await old.closed;
    assert.ok(closedAt - t1 >= 1900, `closed ${closedAt - t1} ms after it opened: before its age and grace`);
  });

  it('a response larger than the windows waits for WINDOW_UPDATEs and arrives whole and in order; a reset stream is dropped', async function () {
    this.timeout(30_000);
    const sock = path.join(dir, 'big.sock');
    const big = Buffer.alloc(5 << 20);
    for (let i = 0; i < big.length; i += 4) big.writeUInt32BE(i, i);
    const srv = net.createServer((c) => new H2Connection(c, (s) => {
      s.onEnd = () => {
        s.respond([[':status', '200']]);
        for (let i = 0; i < big.length; i += 1 << 20) s.write(big.subarray(i, i + (1 << 20)));
        s.end([['x-done', 'yes']]);
      };
    }, LIMITS));
    sockets.push(srv);
    await new Promise<void>((r) => srv.listen(sock, r));
    // A small window: the server has to stop and wait many times.
    const session = http2.connect('http://localhost', { createConnection: () => net.connect(sock), settings: { initialWindowSize: 16_384 } });
    try {
      const body = await new Promise<Buffer>((resolve, reject) => {
        const req = session.request({ ':method': 'POST', ':path': '/big' });
        const parts: Buffer[] = [];
        req.on('data', (d: Buffer) => parts.push(d));
        req.on('end', () => resolve(Buffer.concat(parts)));
        req.on('error', reject);
        req.end();
      });
      assert.ok(body.equals(big), `got ${body.length} bytes`);
      const reset = session.request({ ':method': 'POST', ':path': '/big' });
      reset.on('error', () => undefined);
      reset.end();
      reset.close(http2.constants.NGHTTP2_CANCEL);
      // The connection still serves after the reset.
      const again = await new Promise<number>((resolve, reject) => {
        const req = session.request({ ':method': 'POST', ':path': '/big' });
        let n = 0;
        req.on('data', (d: Buffer) => (n += d.length));
        req.on('end', () => resolve(n));
        req.on('error', reject);
        req.end();
      });
      assert.equal(again, big.length);
    } finally {
      session.close();
    }
  });
});
