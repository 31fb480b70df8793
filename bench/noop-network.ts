// The no-op CNI network (bench/noop-cni.c, built by hack/setup.sh): it touches no kernel object
// and answers an eth0 with a fixed address (containerd's CRI requires one), the floor no network
// goes below. The benches set kni beside it.
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../plugin/server/protos';

/** The no-op plugin into a runtime's CNI bin dir. */
export function copyNoopCni(binDir: string): void {
  fs.copyFileSync(path.join(packageRoot(), 'dist/bin/noop-cni'), `${binDir}/noop-cni`);
}

/** Its conflist into a runtime's CNI conf dir, named to come before kni's (the runtime takes the first). */
export function writeNoopConflist(confDir: string): void {
  fs.writeFileSync(`${confDir}/05-noop.conflist`, JSON.stringify({ cniVersion: '1.0.0', name: 'no-op', plugins: [{ type: 'noop-cni' }] }));
}
