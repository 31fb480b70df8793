// The state store's record logs (plugin/store/record-log.ts) on the real file system: what a
// restart reads back after any sequence of changes, rewrites, a torn or damaged line, a full
// disk, and the import of the file-per-record layout of earlier versions.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import fc from 'fast-check';
import { legacyRecords } from '../plugin/store/legacy-records';
import { RecordLog } from '../plugin/store/record-log';
import { RUN, sh, trySh } from './helpers/sh';

type Rec = { id: string; phase: string; n: number };

describe('record log', () => {
  const dir = `/tmp/${RUN}-recordlog`;
  const file = `${dir}/sandboxes.log`;
  beforeEach(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  const reopen = () => {
    const log = new RecordLog<Rec>(file, legacyRecords(`${dir}/sandboxes`));
    const loaded = log.loadAll();
    return { log, records: new Map(loaded.records.map((r) => [r.id, r])), problems: loaded.problems };
  };

  it('any sequence of puts and deletes, with rewrites along the way, reads back as the last state', () => {
    const seed = Number(process.env.KNI_TEST_SEED ?? Math.floor(Math.random() * 2 ** 31));
    const op = fc.record({ del: fc.boolean(), key: fc.integer({ min: 0, max: 40 }), n: fc.integer(), restart: fc.integer({ min: 0, max: 60 }) });
    fc.assert(fc.property(fc.array(op, { maxLength: 3000, size: 'max' }), (ops) => {
      fs.rmSync(file, { force: true });
      let { log } = reopen();
      const model = new Map<string, Rec>();
      for (const o of ops) {
        const id = `sb-${o.key}`;
        if (o.del) {
          log.delete(id);
          model.delete(id);
        } else {
          const r = { id, phase: 'attached', n: o.n };
          log.put(id, r);
          model.set(id, r);
        }
        if (o.restart === 0) {
          log.close();
          ({ log } = reopen());
        }
      }
      log.close();
      const back = reopen();
      back.log.close();
      assert.deepEqual(back.problems, []);
      assert.deepEqual(back.records, model);
      // Rewrites keep the log near its live records: never more than the slack of lines beyond them.
      assert.ok(fs.readFileSync(file, 'utf8').split('\n').length <= model.size + 1, 'a start rewrites the log');
    }), { seed, numRuns: 40 });
  });

  it('a log that grows is rewritten: lines stay within max(1024, 3 × live) of the live records', () => {
    const { log } = reopen();
    for (let i = 0; i < 5000; i++) log.put(`sb-${i % 10}`, { id: `sb-${i % 10}`, phase: 'attached', n: i });
    const lines = fs.readFileSync(file, 'utf8').split('\n').length - 1;
    log.close();
    assert.ok(lines <= 10 + 1024 + 1, `${lines} lines for 10 records`);
    assert.equal(reopen().records.get('sb-3')!.n, 4993);
  });

  it('a torn last line is dropped; a damaged line is reported, the log kept aside, every other record kept', () => {
    const { log } = reopen();
    for (const id of ['a', 'b', 'c']) log.put(id, { id, phase: 'attached', n: 1 });
    log.close();
    const text = fs.readFileSync(file, 'utf8');
    const damaged = `${text.replace('"k":"b"', '"k":"B"')}00000000 {"k":"d","v":`;
    fs.writeFileSync(file, damaged);
    const back = reopen();
    assert.deepEqual([...back.records.keys()].sort(), ['a', 'c']);
    assert.deepEqual(back.problems, [`${file}: line 2 unreadable (the log is kept as ${file}.corrupt)`, `${file}: a torn last line dropped`]);
    assert.equal(fs.readFileSync(`${file}.corrupt`, 'utf8'), damaged);
    back.log.close();
    assert.deepEqual(reopen().problems, [], 'the start rewrote the log without what it could not read');
  });

  it('records of the file-per-record layout are imported with their marks, and their files removed', () => {
    const old = `${dir}/sandboxes`;
    fs.mkdirSync(old);
    const put = (id: string) => fs.writeFileSync(`${old}/${id}.json`, JSON.stringify({ id, phase: 'attaching', n: 7 }));
    put('done');
    fs.writeFileSync(`${old}/done.attached`, '');
    put('leaving');
    fs.writeFileSync(`${old}/leaving.attached`, '');
    fs.writeFileSync(`${old}/leaving.detaching`, '');
    put('half');
    fs.writeFileSync(`${old}/.next.tmp`, '{"id":');
    fs.writeFileSync(`${old}/orphan.attached`, '');
    fs.writeFileSync(`${old}/broken.json`, '{"id":');
    const back = reopen();
    assert.deepEqual(Object.fromEntries([...back.records].map(([k, r]) => [k, r.phase])), { done: 'attached', leaving: 'detaching', half: 'attaching' });
    assert.equal(back.problems.length, 1);
    assert.match(back.problems[0], /broken\.json: .* \(kept as broken\.json\.corrupt\)/);
    assert.deepEqual(fs.readdirSync(old), ['broken.json.corrupt'], 'imported files left behind');
    back.log.close();
    assert.deepEqual(reopen().records.get('done'), { id: 'done', phase: 'attached', n: 7 });
  });

  it('a full disk: the write fails whole (no half line left for the next one to follow), and the log works once there is room', () => {
    const mnt = `/tmp/${RUN}-recordlog-fs`;
    fs.mkdirSync(mnt, { recursive: true });
    sh('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'kni-test-recordlog', mnt]);
    try {
      const log = new RecordLog<Rec & { pad: string }>(`${mnt}/sandboxes.log`);
      log.loadAll();
      log.put('small', { id: 'small', phase: 'attached', n: 1, pad: '' });
      const pad = 'x'.repeat(100 * 1024);
      assert.throws(() => log.put('big', { id: 'big', phase: 'attached', n: 2, pad }), /ENOSPC/);
      log.put('after', { id: 'after', phase: 'attached', n: 3, pad: '' });
      log.close();
      const back = new RecordLog<Rec>(`${mnt}/sandboxes.log`).loadAll();
      assert.deepEqual(back.problems, []);
      assert.deepEqual(back.records.map((r) => r.id), ['small', 'after']);
    } finally {
      trySh('umount', ['-l', mnt]);
      fs.rmSync(mnt, { recursive: true, force: true });
    }
  });
});
