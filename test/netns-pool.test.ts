// The netns pool on the real kernel, in this process: what it holds is new netns held by
// descriptor only, let go with its thread once too old, a lowered size is kept, a stop closes
// everything (what its thread posts afterwards too), and a lost thread is replaced.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { Worker } from 'node:worker_threads';
import { NetnsPool } from '../plugin/netns/netns-pool';
import { netnsFds } from './helpers/netns-fds';
import { waitFor } from './helpers/wait';

const netnsHeld = () => netnsFds('self');
const until = (what: string, ok: () => boolean) => waitFor(ok, 10_000, () => what, 25);

const homeIno = fs.statSync('/proc/self/ns/net').ino;

describe('netns pool', () => {
  const pools: NetnsPool[] = [];
  const pool = (size: () => number, maxAgeMs?: number) => {
    const p = new NetnsPool(size, maxAgeMs);
    pools.push(p);
    return p;
  };
  let before: Map<number, number>;
  beforeEach(() => (before = netnsHeld()));
  afterEach(async () => {
    for (const p of pools.splice(0)) p.close();
    // The threads' late posts are closed on arrival: nothing of the pools stays open.
    await until('every descriptor of the pools closed', () => [...netnsHeld().keys()].every((fd) => before.has(fd)));
  });

  it('starts at the first take, then hands out new netns of its own, each once', async () => {
    const p = pool(() => 3);
    assert.equal(p.take(), undefined);
    await until('three made ahead', () => p.ready === 3);
    const inodes = new Set<number>();
    for (let i = 0; i < 6; i++) {
      await until('one ready', () => p.ready > 0);
      const fd = p.take()!;
      const ino = fs.fstatSync(fd).ino;
      assert.notEqual(ino, homeIno);
      assert.ok(!inodes.has(ino), 'a netns handed out twice');
      inodes.add(ino);
      fs.closeSync(fd);
    }
    await until('topped up to three', () => p.ready === 3);
  });

  it('lets go of what it holds and of its thread once that is older than its max age', async () => {
    const p = pool(() => 2, 400);
    p.take();
    await until('two made ahead', () => p.ready === 2);
    const old = [...netnsHeld()].filter(([fd, ino]) => !before.has(fd) && ino !== homeIno); // not the thread's own home
    assert.equal(old.length, 2);
    await until('nothing held', () => p.ready === 0);
    const open = netnsHeld();
    for (const [fd, ino] of old) assert.notEqual(open.get(fd), ino, `the old netns on descriptor ${fd} is still open`);
    assert.equal((p as unknown as { worker?: Worker }).worker, undefined);
    assert.equal(p.take(), undefined);
  });

  it('keeps no more than a lowered size, and none at 0', async () => {
    let size = 3;
    const p = pool(() => size);
    p.take();
    await until('three made ahead', () => p.ready === 3);
    size = 1;
    const fd = p.take();
    assert.ok(fd !== undefined);
    fs.closeSync(fd);
    assert.equal(p.ready, 0);
    await until('one made ahead', () => p.ready === 1);
    size = 0;
    assert.equal(p.take(), undefined);
    assert.equal(p.ready, 0);
  });

  it('a stop closes what it holds and what its thread posts afterwards', async () => {
    const p = pool(() => 8);
    p.take(); // the thread is now making eight
    p.close();
    assert.equal(p.take(), undefined);
    // afterEach waits for every descriptor to be closed.
  });

  it('a thread that went away is replaced at the next take', async () => {
    const p = pool(() => 2);
    p.take();
    await until('two made ahead', () => p.ready === 2);
    const w = (p as unknown as { worker: Worker }).worker;
    await w.terminate();
    fs.closeSync(p.take()!); // one of the two it held: they outlive the thread that made them
    for (let i = 0; i < 4; i++) {
      await until('one ready', () => p.ready > 0);
      fs.closeSync(p.take()!);
    }
    assert.notEqual((p as unknown as { worker: Worker }).worker, w);
  });
});
