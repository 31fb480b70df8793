// OpenTelemetry spans: one per RPC, children for each attach step. Off unless the standard
// OTEL_* variables ask for an exporter; when off, withSpan only times the step (a histogram
// per step name, kni_step_duration_seconds) and the SDK is not even loaded.
import { Attributes, SpanStatusCode, trace, TracerProvider } from '@opentelemetry/api';
import { isMainThread } from 'node:worker_threads';
import { KniError } from '../core/errors';
import { log } from '../core/log';

let enabled = false;
let tracer = trace.getTracer('kni');

/** Turns spans on with a provider already set up (an embedding program, or a test). */
export function enableTracing(provider?: TracerProvider): void {
  if (provider) trace.setGlobalTracerProvider(provider);
  tracer = trace.getTracer('kni');
  enabled = true;
}

export const tracingEnabled = (): boolean => enabled;

/** True when the environment names a trace exporter the way every OTel SDK reads it. */
export function tracingRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  const exporter = env.OTEL_TRACES_EXPORTER?.trim();
  if (exporter) return exporter !== 'none';
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/** Starts the Node SDK (exporter, sampler, resource from OTEL_*) if asked; returns its shutdown. */
export function startTracingFromEnv(): (() => Promise<void>) | undefined {
  if (!tracingRequested()) return undefined;
  process.env.OTEL_SERVICE_NAME ||= 'kni-runtime';
  // Metrics and logs go their own way (prom-client, JSON on stdout): traces only.
  process.env.OTEL_METRICS_EXPORTER ||= 'none';
  process.env.OTEL_LOGS_EXPORTER ||= 'none';
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { NodeSDK } = require('@opentelemetry/sdk-node') as typeof import('@opentelemetry/sdk-node');
  const sdk = new NodeSDK({ instrumentations: [] });
  sdk.start();
  enableTracing();
  log('info', 'tracing on', { exporter: process.env.OTEL_TRACES_EXPORTER ?? 'otlp' });
  return () => sdk.shutdown();
}

/** Runs fn inside a span named name (a child of the active one); sync or async alike. Its time
 *  goes to kni_step_duration_seconds{step=name} whether tracing is on or not. Attributes that
 *  take work to make can come as a function, called only with tracing on. */
export function withSpan<T>(name: string, attributes: Attributes | (() => Attributes), fn: () => T): T {
  const started = process.hrtime.bigint();
  const timed = stepTimer(name);
  const stop = () => timed.observe(Number(process.hrtime.bigint() - started) / 1e9);
  if (!enabled) return settle(fn, stop, stop);
  return tracer.startActiveSpan(name, { attributes: typeof attributes === 'function' ? attributes() : attributes }, (span) =>
    settle(
      fn,
      () => {
        span.end();
        stop();
      },
      (e) => {
        span.recordException(e as Error);
        span.setStatus({ code: SpanStatusCode.ERROR, message: (e as Error)?.message });
        if (e instanceof KniError) span.setAttribute('kni.error.code', e.code);
        span.end();
        stop();
      },
    ),
  );
}

/**
 * A step that ran outside JavaScript (native code that reports when it started and ended, as
 * process.hrtime.bigint() counts): its time goes to kni_step_duration_seconds, and with tracing
 * on it is a span of the active one with those times.
 */
export function recordStep(name: string, startNs: bigint, endNs: bigint, attributes: () => Attributes, failed?: Error): void {
  stepTimer(name).observe(Number(endNs - startNs) / 1e9);
  if (!enabled) return;
  const epochMs = Date.now() - Number(process.hrtime.bigint()) / 1e6;
  const span = tracer.startSpan(name, { attributes: attributes(), startTime: epochMs + Number(startNs) / 1e6 });
  if (failed) {
    span.recordException(failed);
    span.setStatus({ code: SpanStatusCode.ERROR, message: failed.message });
  }
  span.end(epochMs + Number(endNs) / 1e6);
}

/** Runs fn and calls done or failed when it has finished: at once, or when its promise settles. */
function settle<T>(fn: () => T, done: () => void, failed: (e: unknown) => void): T {
  let out: T;
  try {
    out = fn();
  } catch (e) {
    failed(e);
    throw e;
  }
  if (!(out instanceof Promise)) {
    done();
    return out;
  }
  return out.then((v) => {
    done();
    return v;
  }, (e) => {
    failed(e);
    throw e;
  }) as T;
}

type StepTimer = { observe(seconds: number): void };
const untimed: StepTimer = { observe: () => undefined };
/**
 * The step's observer, looked up once per name. A step on another thread is not timed: the
 * thread has no metrics endpoint, and prom-client would cost it its own registry's memory.
 */
const stepTimers = new Map<string, StepTimer>();
// Held once loaded: a require() call resolves its path again each time, which cost a fresh
// daemon's first attach ≈ 0.27 ms over its eight step names (CPU profile of that attach).
let stepSeconds: typeof import('./metrics').stepSeconds | undefined;
function stepTimer(name: string): StepTimer {
  if (!isMainThread) return untimed;
  let t = stepTimers.get(name);
  if (!t) {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    stepSeconds ??= (require('./metrics') as typeof import('./metrics')).stepSeconds;
    t = stepSeconds.of(name);
    stepTimers.set(name, t);
  }
  return t;
}
