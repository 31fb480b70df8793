// Wraps a handler: maps KniError codes to gRPC status, hides internal failures behind INTERNAL
// with the message kept, and logs one line per call outcome.
import * as grpc from '@grpc/grpc-js';
import { KniError } from '../core/errors';
import { refusal } from './request-guard';
import { log, logEnabled, msSince } from '../core/log';
import { rpcErrorsTotal } from '../observe/metrics';
import { withSpan } from '../observe/tracing';

export function unary<Req, Res>(
  service: string,
  method: string,
  fn: (req: Req) => Promise<Res> | Res,
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    const started = process.hrtime.bigint();
    const req = call.request as Record<string, unknown>;
    const refused = refusal(req);
    const sandbox = refused ? '' : String(req?.sandbox_id ?? req?.id ?? '').slice(0, 128);
    const answered = (res: Res): void => {
      // Every call's line, off by default: its fields are made only when it is on.
      if (logEnabled('debug')) log('debug', 'rpc', { service, method, sandbox, ms: msSince(started) });
      callback(null, res);
    };
    const failed = (e: unknown): void => {
      const err = e instanceof KniError ? e : new KniError('INTERNAL', `${method}: ${(e as Error)?.message ?? String(e)}`);
      rpcErrorsTotal.inc({ service, method, code: err.code });
      log(err.code === 'INTERNAL' ? 'error' : 'warn', 'rpc failed', {
        service, method, sandbox, code: err.code, error: err.message, ms: msSince(started),
      });
      callback({ code: grpc.status[err.code], details: err.message.length > 1000 ? `${err.message.slice(0, 1000)}…` : err.message });
    };
    if (refused) return failed(new KniError(refused.code, refused.message));
    // The handler starts in this turn, not two promise hops later.
    let out: Promise<Res> | Res;
    try {
      out = withSpan(`${service}/${method}`, { 'rpc.system': 'grpc', 'rpc.service': service, 'rpc.method': method }, () => fn(call.request));
    } catch (e) {
      return failed(e);
    }
    if (out instanceof Promise) out.then(answered, failed);
    else answered(out);
  };
}
