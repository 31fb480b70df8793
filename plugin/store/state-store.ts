// The state store: the sandboxes kni wired and the netns it made, each collection a record log
// in the state dir (record-log.ts says why a log and not a file per record).
import fs from 'node:fs';
import path from 'node:path';
import { legacyRecords } from './legacy-records';
import { RecordLog } from './record-log';
import { NetnsRecord, SandboxRecord } from './records';

export class StateStore {
  readonly sandboxes: RecordLog<SandboxRecord>;
  readonly netns: RecordLog<NetnsRecord>;

  constructor(readonly dir: string) {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    this.sandboxes = new RecordLog(path.join(dir, 'sandboxes.log'), legacyRecords(path.join(dir, 'sandboxes')));
    this.netns = new RecordLog(path.join(dir, 'netns.log'), legacyRecords(path.join(dir, 'netns')));
  }
}
