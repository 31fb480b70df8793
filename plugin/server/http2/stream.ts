// One HTTP/2 stream as the server sees it: the request's headers, data and end as they come,
// and the answer written back under the peer's flow control (the connection sends it).
import { HeaderList } from './hpack';

export interface StreamSink {
  sendHeaders(s: H2Stream, headers: HeaderList, endStream: boolean): void;
  pump(s: H2Stream): void;
  resetStream(s: H2Stream, code: number): void;
}

export class H2Stream {
  /** Set by whoever serves the request. */
  onData: (chunk: Buffer) => void = () => undefined;
  onEnd: () => void = () => undefined;
  /** The stream is gone: answered and ended both ways, reset by either side, or its connection lost. */
  onClose: (aborted: boolean) => void = () => undefined;
  /** Everything written so far has gone out under the peer's flow control. */
  onDrain: () => void = () => undefined;

  remoteEnded = false;
  localEnded = false;
  closed = false;
  headersSent = false;
  sendWindow: number;
  /** DATA waiting for flow control, and the trailers that follow it. */
  readonly pending: Buffer[] = [];
  pendingBytes = 0;
  trailers: HeaderList | undefined;
  /** Bytes received since the last WINDOW_UPDATE for this stream. */
  unacked = 0;

  constructor(
    readonly id: number,
    readonly headers: HeaderList,
    private readonly sink: StreamSink,
    initialWindow: number,
    /** Which connection it came on (a number per connection of the server's). */
    readonly connection = 0,
  ) {
    this.sendWindow = initialWindow;
  }

  header(name: string): string | undefined {
    for (const [n, v] of this.headers) if (n === name) return v;
    return undefined;
  }

  respond(headers: HeaderList, endStream = false): void {
    if (this.closed || this.headersSent) return;
    this.headersSent = true;
    this.sink.sendHeaders(this, headers, endStream);
  }

  write(data: Buffer): void {
    if (this.closed || this.localEnded || !data.length) return;
    this.pending.push(data);
    this.pendingBytes += data.length;
    this.sink.pump(this);
  }

  /** Ends the answer with trailers, once the data before them has gone. */
  end(trailers: HeaderList): void {
    if (this.closed || this.localEnded || this.trailers) return;
    this.trailers = trailers;
    this.sink.pump(this);
  }

  reset(code: number): void {
    if (!this.closed) this.sink.resetStream(this, code);
  }
}
