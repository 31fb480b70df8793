// Watch (server streaming): the events after the caller's resume token (then, when asked, a
// mark that they are all sent), then every new one, until the caller goes away.
//
// Paced by the reader: events are encoded only as the stream takes them (write() says when to
// wait, 'drain' when to go on), so a watcher that resumes from the oldest event and never reads
// holds one stream's window of encoded bytes, not the whole log; what it has not taken yet is a
// list of the log's own events. A watcher more than a whole log behind (EVENT_LOG_SIZE events
// waiting) is ended with RESOURCE_EXHAUSTED and resumes from its last token. Watch streams are
// bounded per connection and in all, so no client can take kni's memory or event loop.
import * as grpc from '@grpc/grpc-js';
import { KniError } from '../core/errors';
import { EVENT_LOG_SIZE, PodEvent } from '../core/events';
import { isoTime, log } from '../core/log';
import { NetworkRuntime } from '../core/network-runtime';
import * as validate from '../core/validate';
import { refusal } from './request-guard';
import { interfaceMessage } from './pod-messages';

/** Watch streams open at once: on one connection, and in all. */
export const MAX_WATCHES_PER_CONNECTION = 8;
export const MAX_WATCHES = 64;

const open = new Map<string, number>();
let openInAll = 0;

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
  const peer = call.getPeer();
  const mine = open.get(peer) ?? 0;
  if (mine >= MAX_WATCHES_PER_CONNECTION || openInAll >= MAX_WATCHES) {
    log('warn', 'a Watch was refused: too many Watch streams', { onConnection: mine, inAll: openInAll });
    return fail(new KniError('RESOURCE_EXHAUSTED', `too many Watch streams: ${mine} on this connection (at most ${MAX_WATCHES_PER_CONNECTION}), ${openInAll} in all (at most ${MAX_WATCHES}); end one, or watch every sandbox in one stream`));
  }
  let queue: PodEvent[];
  let only = '';
  try {
    if (call.request.sandbox_id) only = validate.sandboxId(call.request.sandbox_id);
    queue = rt.events.since(call.request.resume_token ?? '');
  } catch (e) {
    return fail(e instanceof KniError ? e : new KniError('INTERNAL', String(e)));
  }
  open.set(peer, mine + 1);
  openInAll++;
  // Headers at once: a client waiting for the stream's start sees it before the first event.
  call.sendMetadata(new grpc.Metadata());
  let ended = false;
  let waiting = false;
  let next = 0;
  /** The backlog's end mark, written after its last event. */
  let mark = call.request.mark_backlog_end ? { at: queue.length, token: rt.events.newest() } : undefined;
  const stop = (): void => {
    if (ended) return;
    ended = true;
    unsubscribe();
    const left = (open.get(peer) ?? 1) - 1;
    if (left) open.set(peer, left);
    else open.delete(peer);
    openInAll--;
  };
  const pump = (): void => {
    while (!ended && !waiting) {
      if (mark && next === mark.at) {
        const m = mark;
        mark = undefined;
        if (!call.write({ resume_token: m.token, type: 'backlog_end', time: isoTime() })) waiting = true;
        continue;
      }
      if (next >= queue.length) break;
      const e = queue[next++];
      if (only && e.sandboxId !== only) continue;
      if (!call.write(message(e))) waiting = true;
    }
    if (next >= queue.length && !mark) {
      queue = [];
      next = 0;
    } else if (next > 4096) {
      queue = queue.slice(next);
      if (mark) mark.at -= next;
      next = 0;
    }
  };
  // Subscribed in the same tick as the backlog was read: nothing falls between the two.
  const unsubscribe = rt.events.subscribe((e) => {
    if (ended) return;
    queue.push(e);
    if (queue.length - next > EVENT_LOG_SIZE) {
      stop();
      log('warn', 'a Watch caller does not keep up: ended; it resumes from its last token', { waiting: queue.length - next });
      fail(new KniError('RESOURCE_EXHAUSTED', 'watcher too slow: resume with the last resume_token you received'));
      return;
    }
    if (!waiting) pump();
  });
  call.on('drain', () => {
    waiting = false;
    pump();
  });
  call.on('cancelled', stop);
  call.on('close', stop);
  call.on('error', stop);
  call.on('finish', stop);
  pump();
}
