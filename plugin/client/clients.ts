// Promise-based clients of both services over the daemon's unix socket (knictl, tests).
import * as grpc from '@grpc/grpc-js';
import { kniService, runtimeService } from '../server/protos';

export type Call = (req?: object, timeoutMs?: number) => Promise<any>;
export type Client = Record<string, Call> & { close(): void };

function wrap(raw: grpc.Client, methods: string[]): Client {
  const out: Record<string, unknown> = { close: () => raw.close() };
  for (const m of methods) {
    out[m] = (req: object = {}, timeoutMs = 30_000) =>
      new Promise((resolve, reject) => {
        (raw as any)[m](req, { deadline: Date.now() + timeoutMs }, (err: grpc.ServiceError | null, res: unknown) => (err ? reject(err) : resolve(res)));
      });
  }
  return out as Client;
}

/** The unary methods (Watch streams: see watchEvents). */
function methodsOf(ctor: grpc.ServiceClientConstructor): string[] {
  return Object.keys(ctor.service).filter((m) => !ctor.service[m].responseStream);
}

/**
 * Watch: calls onEvent for each event until the stream ends; returns the stream (close() stops
 * it). `opened` settles once kni has subscribed the watcher (its response headers arrive: kni
 * sends them in the turn it subscribes) or the stream has ended: events after that are seen.
 */
export function watchEvents(socketPath: string, req: { resume_token?: string; sandbox_id?: string; mark_backlog_end?: boolean }, onEvent: (e: any) => void, onEnd: (err?: grpc.ServiceError) => void): grpc.ClientReadableStream<unknown> & { close(): void; opened: Promise<void> } {
  const Ctor = runtimeService();
  const raw = new Ctor(`unix://${socketPath}`, grpc.credentials.createInsecure());
  const stream = (raw as any).Watch(req) as grpc.ClientReadableStream<unknown>;
  stream.on('data', onEvent);
  let open: () => void = () => undefined;
  const opened = new Promise<void>((resolve) => (open = resolve));
  stream.once('metadata', () => open());
  let ended = false;
  const end = (e?: grpc.ServiceError) => {
    open();
    if (ended) return;
    ended = true;
    onEnd(e);
  };
  // A failed stream emits 'error'; 'end' may follow it: the first one tells.
  stream.on('error', (e: grpc.ServiceError) => end(e));
  stream.on('end', () => end());
  return Object.assign(stream, { opened, close: () => { stream.cancel(); raw.close(); } });
}

export function runtimeClient(socketPath: string): Client {
  const Ctor = runtimeService();
  return wrap(new Ctor(`unix://${socketPath}`, grpc.credentials.createInsecure()), methodsOf(Ctor));
}

export function kniClient(socketPath: string): Client {
  const Ctor = kniService();
  return wrap(new Ctor(`unix://${socketPath}`, grpc.credentials.createInsecure()), methodsOf(Ctor));
}

/** Every pod, following ListPods pages. */
export async function listAllPods(c: Client): Promise<any[]> {
  const pods: any[] = [];
  let token = '';
  do {
    const page = await c.ListPods({ page_token: token });
    pods.push(...page.pods);
    token = page.next_page_token;
  } while (token);
  return pods;
}
