// The netns pool's thread (netns-pool.ts): makes the network namespaces it is asked for and
// hands back a descriptor of each. Descriptors belong to the process, so the main thread owns
// each one from the moment it is posted. The thread enters each new netns only inside newNetns
// and always comes back (or aborts the process).
import { parentPort } from 'node:worker_threads';
import { newNetns } from './netns';
import { threadLoaded } from '../sys/threads';

export type PoolRequest = { make: number } | { stop: true };
export type PoolReply = { fd: number } | { error: string };

if (parentPort) {
  const port = parentPort;
  port.on('message', (m: PoolRequest) => {
    if ('stop' in m) return port.close();
    for (let i = 0; i < m.make; i++) {
      try {
        port.postMessage({ fd: newNetns() } satisfies PoolReply);
      } catch (e) {
        port.postMessage({ error: (e as Error).message } satisfies PoolReply);
        return;
      }
    }
  });
  threadLoaded();
}
