// The tests' own CNI plugins (compiled helpers under dist/test/helpers), put into a CNI bin dir
// under the name a config's "type" gives, as a script that runs them with this Node.
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';

/** device-cni: moves the device it is given into the pod; record-cni: writes down what it was given. */
export function installTestPlugin(binDir: string, type: string, helper: 'device-cni' | 'record-cni'): string {
  fs.mkdirSync(binDir, { recursive: true });
  const file = path.join(binDir, type);
  fs.writeFileSync(file, `#!/bin/sh\nexec ${process.execPath} ${path.join(packageRoot(), `dist/test/helpers/${helper}.js`)} "$@"\n`, { mode: 0o755 });
  return file;
}
