// kni's NRI bytes against fixed bytes written from the upstream field numbers (containerd/nri
// pkg/api/api.proto, ttrpc's Request/Response), by a peer that shares no code with kni's
// encoders: a shared bug in kni's proto file or framing cannot pass here.
import assert from 'node:assert/strict';
import net from 'node:net';
import { hex, RawPeer } from './helpers/raw-peer';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

// --- a minimal, independent protobuf writer and reader (length-delimited fields < 128 bytes
// are written by hand below; the helpers take any length) ---
const varint = (n: number): Buffer => {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n = Math.floor(n / 128);
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return Buffer.from(out);
};
const ld = (field: number, body: Buffer | string): Buffer => {
  const b = typeof body === 'string' ? Buffer.from(body) : body;
  return Buffer.concat([varint((field << 3) | 2), varint(b.length), b]);
};
const vi = (field: number, n: number): Buffer => Buffer.concat([varint(field << 3), varint(n)]);

/** Top-level fields of a message: field number → raw bytes (LEN) or number (VARINT). */
function fields(b: Buffer): Map<number, Buffer | number> {
  const out = new Map<number, Buffer | number>();
  let o = 0;
  const readVarint = () => {
    let n = 0;
    let mul = 1;
    for (;;) {
      const x = b[o++];
      n += (x & 0x7f) * mul;
      if (!(x & 0x80)) return n;
      mul *= 128;
    }
  };
  while (o < b.length) {
    const tag = readVarint();
    if ((tag & 7) === 2) {
      const len = readVarint();
      out.set(tag >> 3, b.subarray(o, o + len));
      o += len;
    } else if ((tag & 7) === 0) out.set(tag >> 3, readVarint());
    else throw new Error(`wire type ${tag & 7} not expected here`);
  }
  return out;
}

// --- framing: mux (conn id, length) and ttrpc (length, stream id, type, flags) ---
const muxFrame = (conn: number, payload: Buffer) => Buffer.concat([hex(conn.toString(16).padStart(8, '0')), hex(payload.length.toString(16).padStart(8, '0')), payload]);
const ttrpcFrame = (stream: number, type: number, msg: Buffer) =>
  Buffer.concat([hex(msg.length.toString(16).padStart(8, '0')), hex(stream.toString(16).padStart(8, '0')), Buffer.from([type, 0]), msg]);

/** A runtime peer: reads kni's mux/ttrpc frames, sends requests, collects responses. */
class WirePeer {
  private buf = Buffer.alloc(0);
  private ttrpcBuf = new Map<number, Buffer>();
  readonly requests: { conn: number; stream: number; msg: Map<number, Buffer | number> }[] = [];
  readonly responses = new Map<number, Map<number, Buffer | number>>();
  constructor(readonly sock: net.Socket) {
    sock.on('data', (d: Buffer) => this.onData(d));
  }
  private onData(d: Buffer): void {
    this.buf = Buffer.concat([this.buf, d]);
    while (this.buf.length >= 8 && this.buf.length >= 8 + this.buf.readUInt32BE(4)) {
      const conn = this.buf.readUInt32BE(0);
      const len = this.buf.readUInt32BE(4);
      let t = Buffer.concat([this.ttrpcBuf.get(conn) ?? Buffer.alloc(0), this.buf.subarray(8, 8 + len)]);
      this.buf = this.buf.subarray(8 + len);
      while (t.length >= 10 && t.length >= 10 + t.readUInt32BE(0)) {
        const mlen = t.readUInt32BE(0);
        const stream = t.readUInt32BE(4);
        const type = t[8];
        assert.equal(t[9], 0, 'ttrpc flags');
        const msg = fields(t.subarray(10, 10 + mlen));
        if (type === 1) this.requests.push({ conn, stream, msg });
        else if (type === 2) this.responses.set(stream, msg);
        t = t.subarray(10 + mlen);
      }
      this.ttrpcBuf.set(conn, t);
    }
  }
  /** Sends a Plugin request on conn 1 (the plugin serves there) and returns its response payload. */
  async call(stream: number, method: string, payload: Buffer): Promise<Buffer> {
    const req = Buffer.concat([ld(1, 'nri.pkg.api.v1alpha1.Plugin'), ld(2, method), ld(3, payload), vi(4, 2_000_000_000)]);
    this.sock.write(muxFrame(1, ttrpcFrame(stream, 1, req)));
    await waitFor(() => this.responses.has(stream), 10_000, () => `no response to ${method}`);
    const res = this.responses.get(stream)!;
    assert.equal(res.get(1), undefined, `${method} answered with a status: ${(res.get(1) as Buffer)?.toString()}`);
    return (res.get(2) as Buffer | undefined) ?? Buffer.alloc(0);
  }
}

describe('NRI wire bytes (independent of kni\'s encoder)', () => {
  let d: TestDaemon;
  let peer: RawPeer;
  let wire: WirePeer | undefined;
  before(async () => {
    peer = new RawPeer((sock) => (wire ??= new WirePeer(sock)));
    await peer.listen();
    d = await TestDaemon.start({ nri: { enabled: true, socket: peer.socket, syncGraceSeconds: 0 } });
    await waitFor(() => wire !== undefined && wire.requests.length > 0, 10_000, () => 'kni did not send RegisterPlugin');
  });
  after(async () => {
    d?.cleanup();
    await peer?.close();
  });

  it('RegisterPlugin: conn 2, stream 1, service/method names, RegisterPluginRequest{plugin_name=1 "kni", plugin_idx=2 "10"}', () => {
    const r = wire!.requests[0];
    assert.equal(r.conn, 2);
    assert.equal(r.stream, 1);
    assert.equal((r.msg.get(1) as Buffer).toString(), 'nri.pkg.api.v1alpha1.Runtime');
    assert.equal((r.msg.get(2) as Buffer).toString(), 'RegisterPlugin');
    assert.equal((r.msg.get(3) as Buffer).toString('hex'), '0a036b6e69' + '12023130');
    assert.ok((r.msg.get(4) as number) > 0, 'timeout_nano (field 4) missing');
    wire!.sock.write(muxFrame(2, ttrpcFrame(1, 2, Buffer.alloc(0)))); // Response{} = OK, Empty
  });

  it('Configure: ConfigureRequest decoded, ConfigureResponse{events=2: 0x7} exactly', async () => {
    // config=1 "", runtime_name=2 "rt", runtime_version=3 "1", registration_timeout=4 5000, request_timeout=5 2000
    const res = await wire!.call(1, 'Configure', hex('1202 7274 1a01 31 2088 27 28d0 0f'));
    assert.equal(res.toString('hex'), '1007');
  });

  it('Synchronize: SynchronizeRequest{pods=1, more=3} decoded; SynchronizeResponse{more=2} mirrors it', async () => {
    assert.equal((await wire!.call(3, 'Synchronize', Buffer.concat([ld(1, ld(1, 'nobody')), hex('1801')]))).toString('hex'), '1001');
    assert.equal((await wire!.call(5, 'Synchronize', Buffer.alloc(0))).toString('hex'), '');
  });

  it('RunPodSandbox: every PodSandbox field kni reads, at its upstream number; StateChange STOP (event=1: 2, pod=2) releases it', async () => {
    const netns = d.makePodNetns('wire');
    const pod = Buffer.concat([
      ld(1, 'wire-pod'), ld(2, 'web'), ld(3, 'uid-7'), ld(4, 'shop'),
      ld(5, Buffer.concat([ld(1, 'tier'), ld(2, 'front')])), // labels entry: key=1, value=2
      ld(6, Buffer.concat([ld(1, 'note'), ld(2, 'x')])), // annotations entry
      ld(7, 'runc'),
      ld(8, Buffer.concat([ld(3, '/kubepods'), ld(5, Buffer.concat([ld(1, 'network'), ld(2, netns)]))])), // linux: cgroup_parent=3, namespaces=5
      vi(9, 42),
    ]);
    assert.equal((await wire!.call(7, 'RunPodSandbox', ld(1, pod))).toString('hex'), '');
    const p = await d.rt().GetPod({ sandbox_id: 'wire-pod' });
    assert.deepEqual(p.pod, { name: 'web', namespace: 'shop', uid: 'uid-7' });
    assert.deepEqual(p.labels, { tier: 'front' });
    assert.deepEqual(p.annotations, { note: 'x' });
    assert.equal(p.runtime_handler, 'runc');
    assert.equal(p.netns_path, netns);
    assert.equal((await wire!.call(9, 'StateChange', Buffer.concat([vi(1, 2), ld(2, ld(1, 'wire-pod'))]))).toString('hex'), '');
    assert.deepEqual((await d.rt().ListPods({})).pods, []);
  });

  it('an unserved method answers Response{status=1: {code=1: 12 UNIMPLEMENTED}}', async () => {
    const req = Buffer.concat([ld(1, 'nri.pkg.api.v1alpha1.Plugin'), ld(2, 'CreateContainer'), ld(3, Buffer.alloc(0))]);
    wire!.sock.write(muxFrame(1, ttrpcFrame(11, 1, req)));
    await waitFor(() => wire!.responses.has(11), 10_000, () => 'no response');
    const status = fields(wire!.responses.get(11)!.get(1) as Buffer);
    assert.equal(status.get(1), 12);
    assert.match((status.get(2) as Buffer).toString(), /CreateContainer is not served by kni/);
  });
});
