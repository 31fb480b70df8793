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

function methodsOf(ctor: grpc.ServiceClientConstructor): string[] {
  return Object.keys(ctor.service);
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
