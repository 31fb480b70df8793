// Imports run one way (entry points → runtime facade → stages → kernel, store, IPAM): madge,
// reading the TypeScript sources with type imports counted, finds no cycle in plugin/ and
// runtime-hooks/. A stage that needs something of the runtime declares it (a narrow interface
// beside its code) instead of importing the runtime.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

/** Where hack/setup.sh installs madge (and the TypeScript 5 its parser needs). */
const MADGE = '/var/cache/kni-tools/madge-8.0.0/node_modules/madge';

interface MadgeResult {
  obj(): Record<string, string[]>;
  circular(): string[][];
}

describe('import cycles', function () {
  this.timeout(120_000);

  it('madge finds no circular import in plugin/ and runtime-hooks/, type imports included', async () => {
    assert.ok(fs.existsSync(MADGE), `${MADGE} is missing: run bash hack/setup.sh`);
    const madge = require(MADGE) as (paths: string[], options: object) => Promise<MadgeResult>;
    const root = path.resolve(__dirname, '../..');
    const graph = await madge([path.join(root, 'plugin'), path.join(root, 'runtime-hooks')], {
      baseDir: root,
      fileExtensions: ['ts'],
      detectiveOptions: { ts: { skipTypeImports: false }, tsx: { skipTypeImports: false } },
    });
    assert.ok(Object.keys(graph.obj()).length > 100, `madge read only ${Object.keys(graph.obj()).length} files`);
    assert.deepEqual(graph.circular(), [], 'circular imports');
  });
});
