// The state store: the sandboxes kni wired and the netns it made, each collection a record log
// in the state dir (record-log.ts says why a log and not a file per record).
import path from 'node:path';
import { legacyRecords } from './legacy-records';
import { RecordLog } from './record-log';
import { NetnsRecord, SandboxRecord } from './records';
import { makeDir } from '../sys/make-dir';

export class StateStore {
  readonly sandboxes: RecordLog<SandboxRecord>;
  readonly netns: RecordLog<NetnsRecord>;

  constructor(readonly dir: string) {
    makeDir(dir, 0o700);
    this.sandboxes = new RecordLog(path.join(dir, 'sandboxes.log'), legacyRecords(path.join(dir, 'sandboxes')));
    this.netns = new RecordLog(path.join(dir, 'netns.log'), legacyRecords(path.join(dir, 'netns')));
  }
}
