// A watch of the API server that starts itself again when it breaks. Every watch kni keeps
// (Nodes, its ConfigMap, NetworkAttachmentDefinitions, the node's Pods) breaks the same way
// when the API server goes away, so they share one policy: the first retry soon, each next one
// twice as late up to a cap, one log line per distinct failure rather than one per retry (an
// outage of an hour is not 700 identical lines), a line when the watch is back, and every
// restart counted in kni_kubernetes_watch_restarts_total.
import { log } from '../core/log';
import { watchRestartsTotal } from '../observe/metrics';
import { apiError } from './kube-api';

/** What WatchRestart needs of an informer (@kubernetes/client-node's ListWatch). */
export interface RestartableWatch {
  start(): Promise<void>;
  stop(): Promise<void>;
  on(verb: 'error', cb: (err: unknown) => void): void;
}

export interface WatchRestartOptions {
  /** The metric's resource label: nodes, configmap, network-attachment-definition, pod. */
  resource: string;
  /** What the log lines name: "Node watch". */
  what: string;
  /** The log line for a failure, when a plain "broke; starting it again" would not help. */
  describe?: (error: string) => string;
  /** Fields every log line carries (the ConfigMap's name). */
  fields?: Record<string, unknown>;
  /** Called at each failure with the wait before the next start. */
  onBroke?: (error: string, retryInMs: number) => void;
  /** Called when the watch is up: listed (when it had to) and watching. */
  onConnected?: () => void;
  firstMs?: number;
  maxMs?: number;
}

export class WatchRestart {
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private delayMs: number;
  private readonly firstMs: number;
  private readonly maxMs: number;
  /** The failure since the watch last connected; '' while it is up. */
  lastError = '';
  /** Failures since kni started. */
  restarts = 0;

  constructor(private readonly watch: RestartableWatch, private readonly o: WatchRestartOptions) {
    this.firstMs = o.firstMs ?? 1000;
    this.maxMs = o.maxMs ?? 30_000;
    this.delayMs = this.firstMs;
    watch.on('error', (e) => this.broke(e));
  }

  /**
   * Starts the watch. An informer's start() reports a failed list or watch request as an error
   * event, not by rejecting, and resolves once its watch request is answered: resolved with no
   * failure meanwhile, the watch is up. (Its connect event comes before the list, so it says
   * nothing about the API server being there.)
   */
  begin(): void {
    if (this.stopped) return;
    const failures = this.restarts;
    this.watch.start().then(
      () => {
        if (!this.stopped && this.restarts === failures) this.connected();
      },
      (e) => this.broke(e),
    );
  }

  /** The watch is up (or delivering): the next failure retries after the first delay again. */
  connected(): void {
    if (this.lastError) log('info', `${this.o.what} is back`, { ...this.o.fields, restarts: this.restarts });
    this.lastError = '';
    this.delayMs = this.firstMs;
    this.o.onConnected?.();
  }

  /** The informer's error event, or its start() failing. */
  broke(e: unknown): void {
    if (this.stopped) return;
    const error = apiError(e);
    this.restarts++;
    watchRestartsTotal.inc({ resource: this.o.resource });
    if (error !== this.lastError) {
      log('warn', this.o.describe?.(error) ?? `${this.o.what} broke; starting it again`, { ...this.o.fields, error, retryInMs: this.delayMs });
    }
    this.lastError = error;
    this.o.onBroke?.(error, this.delayMs);
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.begin();
    }, this.delayMs);
    this.timer.unref();
    this.delayMs = Math.min(this.delayMs * 2, this.maxMs);
  }

  /** Stops the watch and any restart planned. */
  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    void this.watch.stop();
  }
}
