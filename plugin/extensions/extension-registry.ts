// Extensions registered with kni (kni.extension.v1 served on their own sockets): stored in the
// state dir — a registration survives kni restarts and upgrades and ends only when it is
// unregistered, never because a file on the host changed — and called in a fixed order (order,
// then name) for every attach (before kni answers the runtime) and detach (best effort).
import * as grpc from '@grpc/grpc-js';
import fs from 'node:fs';
import path from 'node:path';
import { KniError, invalid } from '../core/errors';
import { log } from '../core/log';
import { socketPathProblem } from '../core/validate';
import { extensionCalls, extensionSeconds } from '../observe/metrics';
import { extensionService, GRPC_COMMON_OPTIONS } from '../server/protos';
import { SandboxRecord } from '../store/records';
import { makeDir } from '../sys/make-dir';

export type ExtensionEvent = 'attached' | 'detached';

export interface Registration {
  name: string;
  socket: string;
  order: number;
  events: ExtensionEvent[];
  timeoutMs: number;
  failurePolicy: 'fail' | 'ignore';
  registeredAt: string;
  /** The registering pod ('' names: none given). */
  owner: { namespace: string; name: string; uid: string };
}

export interface ExtensionStatus extends Registration {
  healthy: boolean;
  lastError: string;
  calls: number;
  failures: number;
  lastCallMs: number;
}

interface Live {
  reg: Registration;
  client: grpc.Client;
  healthy: boolean;
  lastError: string;
  calls: number;
  failures: number;
  lastCallMs: number;
}

const DETACH_TRIES = 3;

export function extensionName(name: unknown): string {
  if (typeof name !== 'string' || !/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(name)) throw invalid(`extension name ${JSON.stringify(String(name).slice(0, 64))} is not a DNS label`);
  return name;
}

export function validateRegistration(r: Record<string, unknown>): Registration {
  const name = extensionName(r.name);
  const socket = r.socket;
  const problem = socketPathProblem(socket, 'extension socket');
  if (problem) throw invalid(problem);
  const order = Number(r.order ?? 0);
  if (!Number.isInteger(order) || order < -1000000 || order > 1000000) throw invalid('extension order must be a whole number from -1000000 to 1000000');
  const events = (Array.isArray(r.events) && r.events.length ? r.events : ['attached', 'detached']) as string[];
  for (const e of events) if (e !== 'attached' && e !== 'detached') throw invalid(`extension event ${JSON.stringify(String(e).slice(0, 32))} is not attached or detached`);
  const timeoutMs = Number(r.timeout_ms ?? r.timeoutMs ?? 0) || 5000;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 60_000) throw invalid('extension timeout_ms must be from 1 to 60000');
  const policy = (r.failure_policy ?? r.failurePolicy ?? '') || 'fail';
  if (policy !== 'fail' && policy !== 'ignore') throw invalid(`extension failure_policy ${JSON.stringify(String(policy).slice(0, 32))} is not fail or ignore`);
  const o = (r.owner ?? {}) as Record<string, unknown>;
  const owner = { namespace: String(o.namespace ?? ''), name: String(o.name ?? ''), uid: String(o.uid ?? '').toLowerCase() };
  for (const [k, v] of Object.entries(owner)) if (v && !/^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/.test(v)) throw invalid(`extension owner ${k} ${JSON.stringify(v.slice(0, 64))} is not a Kubernetes name`);
  if ((owner.namespace === '') !== (owner.name === '')) throw invalid('extension owner needs both namespace and name');
  return { name, socket: socket as string, order, events: [...new Set(events)] as ExtensionEvent[], timeoutMs, failurePolicy: policy, registeredAt: typeof r.registeredAt === 'string' ? r.registeredAt : new Date().toISOString(), owner };
}

export class ExtensionRegistry {
  private readonly live = new Map<string, Live>();

  constructor(private readonly dir: string, private required: string[], private readonly onChange: () => void) {}

  /** extensions.required changed live. */
  setRequired(required: string[]): void {
    this.required = required;
    this.onChange();
  }

  /** Registrations made by a pod (for the node agent to check the pod still exists). */
  owned(): Registration[] {
    return [...this.live.values()].map((l) => l.reg).filter((r) => r.owner.name);
  }

  /** Registrations from the state dir (at start). An unreadable file is logged and set aside. */
  load(): void {
    let names: string[] = [];
    try {
      names = fs.readdirSync(this.dir).filter((n) => n.endsWith('.json'));
    } catch {
      return;
    }
    for (const n of names) {
      try {
        const reg = validateRegistration(JSON.parse(fs.readFileSync(path.join(this.dir, n), 'utf8')));
        this.live.set(reg.name, this.connect(reg, true, ''));
      } catch (e) {
        log('error', 'extension registration unreadable: set aside', { file: n, error: (e as Error).message });
        fs.renameSync(path.join(this.dir, n), path.join(this.dir, `${n}.corrupt`));
      }
    }
  }

  private connect(reg: Registration, healthy: boolean, lastError: string): Live {
    const Ctor = extensionService();
    return { reg, client: new Ctor(`unix://${reg.socket}`, grpc.credentials.createInsecure(), GRPC_COMMON_OPTIONS), healthy, lastError, calls: 0, failures: 0, lastCallMs: 0 };
  }

  private call(l: Live, method: 'PodAttached' | 'PodDetached' | 'Check', req: object): Promise<any> {
    const started = process.hrtime.bigint();
    return new Promise((resolve, reject) => {
      (l.client as any)[method](req, { deadline: Date.now() + l.reg.timeoutMs }, (e: grpc.ServiceError | null, r: unknown) => {
        const s = Number(process.hrtime.bigint() - started) / 1e9;
        l.calls++;
        l.lastCallMs = s * 1e3;
        extensionSeconds.observe({ extension: l.reg.name, method }, s);
        extensionCalls.inc({ extension: l.reg.name, method, result: e ? 'error' : 'ok' });
        if (e) {
          l.failures++;
          const why = e.code === grpc.status.DEADLINE_EXCEEDED ? `no answer within ${l.reg.timeoutMs} ms` : e.code === grpc.status.UNAVAILABLE ? `unreachable at ${l.reg.socket} (${e.details})` : `${grpc.status[e.code]}: ${e.details}`;
          l.lastError = `${method}: ${why}`;
          reject(new Error(why));
        } else resolve(r);
      });
    });
  }

  /** Checks the extension answers (and is healthy), stores the registration, replaces an older one. */
  async register(raw: Record<string, unknown>): Promise<ExtensionStatus> {
    const reg = validateRegistration(raw);
    const l = this.connect(reg, false, '');
    try {
      const r = await this.call(l, 'Check', {});
      if (!r?.healthy) throw new Error(`says it is not healthy${r?.message ? `: ${r.message}` : ''}`);
    } catch (e) {
      l.client.close();
      throw new KniError('FAILED_PRECONDITION', `extension ${reg.name} at ${reg.socket} did not pass its Check: ${(e as Error).message}`);
    }
    l.healthy = true;
    makeDir(this.dir, 0o700);
    const f = path.join(this.dir, `${reg.name}.json`);
    fs.writeFileSync(`${f}.tmp`, JSON.stringify(reg));
    fs.renameSync(`${f}.tmp`, f);
    this.live.get(reg.name)?.client.close();
    this.live.set(reg.name, l);
    log('info', 'extension registered', { extension: reg.name, socket: reg.socket, order: reg.order, events: reg.events, policy: reg.failurePolicy });
    this.onChange();
    return this.statusOf(l);
  }

  unregister(name: string): boolean {
    const l = this.live.get(name);
    fs.rmSync(path.join(this.dir, `${name}.json`), { force: true });
    if (!l) return false;
    l.client.close();
    this.live.delete(name);
    log('info', 'extension unregistered', { extension: name });
    this.onChange();
    return true;
  }

  private ordered(event: ExtensionEvent): Live[] {
    return [...this.live.values()].filter((l) => l.reg.events.includes(event)).sort((a, b) => a.reg.order - b.reg.order || a.reg.name.localeCompare(b.reg.name));
  }

  /** Whether any extension wants this event (no span, no call otherwise). */
  wants(event: ExtensionEvent): boolean {
    return [...this.live.values()].some((l) => l.reg.events.includes(event));
  }

  /** Every extension in order; a failing one with policy "fail" fails the attach. */
  async podAttached(rec: SandboxRecord): Promise<void> {
    for (const l of this.ordered('attached')) {
      // Health is what Check says (at registration and every reconcile period): one pod's
      // failure is that pod's, it does not close the node to every other pod.
      try {
        await this.call(l, 'PodAttached', podContext(rec));
      } catch (e) {
        if (l.reg.failurePolicy === 'ignore') {
          log('warn', 'extension failed; its policy is ignore', { extension: l.reg.name, sandbox: rec.id, error: (e as Error).message });
          continue;
        }
        throw new KniError('UNAVAILABLE', `extension ${l.reg.name} failed for pod ${rec.pod.namespace}/${rec.pod.name}: ${(e as Error).message}`);
      }
    }
  }

  /** Best effort, in the background, each extension retried a few times. */
  podDetached(rec: SandboxRecord): void {
    for (const l of this.ordered('detached')) {
      void (async () => {
        for (let i = 1; i <= DETACH_TRIES; i++) {
          try {
            await this.call(l, 'PodDetached', podContext(rec));
            return;
          } catch (e) {
            if (i === DETACH_TRIES) log('warn', 'extension PodDetached failed; giving up', { extension: l.reg.name, sandbox: rec.id, error: (e as Error).message });
            else await new Promise((r) => setTimeout(r, 500 * i).unref());
          }
        }
      })();
    }
  }

  /** Every extension's Check (the periodic health probe). */
  async checkAll(): Promise<void> {
    for (const l of this.live.values()) {
      try {
        const r = await this.call(l, 'Check', {});
        this.setHealth(l, !!r?.healthy, r?.healthy ? '' : `Check: not healthy${r?.message ? `: ${r.message}` : ''}`);
      } catch {
        this.setHealth(l, false);
      }
    }
  }

  private setHealth(l: Live, healthy: boolean, lastError?: string): void {
    if (lastError !== undefined) l.lastError = lastError;
    if (l.healthy === healthy) return;
    l.healthy = healthy;
    log(healthy ? 'info' : 'warn', healthy ? 'extension healthy again' : 'extension unhealthy', { extension: l.reg.name, error: l.lastError });
    this.onChange();
  }

  /** Why pods may not start yet: a required extension missing or unhealthy ('' = none). */
  gateReason(): string {
    const missing = this.required.filter((n) => !this.live.has(n));
    if (missing.length) return `waiting for required extension(s) ${missing.join(', ')} to register`;
    const sick = this.required.filter((n) => !this.live.get(n)!.healthy);
    if (sick.length) return `required extension(s) ${sick.map((n) => `${n} (${this.live.get(n)!.lastError || 'unhealthy'})`).join(', ')} not healthy`;
    return '';
  }

  list(): ExtensionStatus[] {
    return [...this.live.values()].sort((a, b) => a.reg.order - b.reg.order || a.reg.name.localeCompare(b.reg.name)).map((l) => this.statusOf(l));
  }

  private statusOf(l: Live): ExtensionStatus {
    return { ...l.reg, healthy: l.healthy, lastError: l.lastError, calls: l.calls, failures: l.failures, lastCallMs: l.lastCallMs };
  }

  close(): void {
    for (const l of this.live.values()) l.client.close();
  }
}

function podContext(rec: SandboxRecord): Record<string, unknown> {
  return {
    sandbox_id: rec.id,
    pod_name: rec.pod.name,
    pod_namespace: rec.pod.namespace,
    pod_uid: rec.pod.uid,
    netns_path: rec.netnsPath,
    interfaces: rec.interfaces.map((i) => ({ name: i.name, mac: i.mac, addresses: i.addresses.map((a) => `${a.address}/${a.prefixLength}`) })),
    labels: rec.labels,
    annotations: rec.annotations,
    kind: rec.kind ?? 'container',
  };
}
