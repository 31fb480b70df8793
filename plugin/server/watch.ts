// Watch (server streaming): the events after the caller's resume token (then, when asked, a
// mark that they are all sent), then every new one, until the caller goes away. A watcher that cannot keep up (more than MAX_BUFFERED bytes
// waiting) is ended with RESOURCE_EXHAUSTED and resumes from its last token.
import * as grpc from '@grpc/grpc-js';
import { KniError } from '../core/errors';
import { PodEvent } from '../core/events';
import { isoTime, log } from '../core/log';
import { NetworkRuntime } from '../core/network-runtime';
import * as validate from '../core/validate';
import { refusal } from './request-guard';
import { interfaceMessage } from './runtime-service';

const MAX_BUFFERED = 16 << 20;

function message(e: PodEvent): Record<string, unknown> {
  return {
    resume_token: e.token,
    type: e.type,
    sandbox_id: e.sandboxId,
    pod: e.pod,
    netns_path: e.netnsPath,
    interfaces: e.interfaces.map(interfaceMessage),
    message: e.message,
    time: isoTime(e.timeMs),
  };
}

export function watch(rt: NetworkRuntime, call: grpc.ServerWritableStream<{ resume_token: string; sandbox_id: string; mark_backlog_end?: boolean }, unknown>): void {
  const fail = (e: KniError): void => {
    // grpc-js ends a server stream with a status when the call emits an error with a code.
    call.emit('error', { code: grpc.status[e.code], details: e.message, metadata: new grpc.Metadata() });
  };
  const refused = refusal(call.request);
  if (refused) return fail(new KniError(refused.code, refused.message));
  let backlog: PodEvent[];
  let only = '';
  try {
    if (call.request.sandbox_id) only = validate.sandboxId(call.request.sandbox_id);
    backlog = rt.events.since(call.request.resume_token ?? '');
  } catch (e) {
    return fail(e instanceof KniError ? e : new KniError('INTERNAL', String(e)));
  }
  let ended = false;
  const send = (e: PodEvent): void => {
    if (ended || (only && e.sandboxId !== only)) return;
    if (call.writableLength > MAX_BUFFERED) {
      ended = true;
      unsubscribe();
      log('warn', 'a Watch caller does not keep up: ended; it resumes from its last token', { buffered: call.writableLength });
      fail(new KniError('RESOURCE_EXHAUSTED', 'watcher too slow: resume with the last resume_token you received'));
      return;
    }
    call.write(message(e));
  };
  // Subscribed in the same tick as the backlog was read: nothing falls between the two.
  const unsubscribe = rt.events.subscribe(send);
  const stop = () => {
    ended = true;
    unsubscribe();
  };
  call.on('cancelled', stop);
  call.on('close', stop);
  call.on('error', stop);
  const newest = rt.events.newest();
  for (const e of backlog) send(e);
  if (call.request.mark_backlog_end && !ended) call.write({ resume_token: newest, type: 'backlog_end', time: isoTime() });
}
