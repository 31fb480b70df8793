// The build's bundle of the Kubernetes client (k8s-client.ts) is what the daemon loads: it must
// hold every name the module lists, as the library's own values.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

describe('the bundled Kubernetes client', () => {
  it('exports every name k8s-client.ts lists, and nothing is missing from it', () => {
    const dir = path.join(__dirname, '../plugin/kube');
    const bundle = path.join(dir, 'k8s-client.bundle.js');
    assert.ok(fs.existsSync(bundle), `${bundle} is missing: npm run build makes it`);
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const listed = Object.keys(require(path.join(dir, 'k8s-client.js'))).filter((k) => k !== '__esModule').sort();
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const bundled = require(bundle) as Record<string, unknown>;
    assert.ok(listed.length > 5);
    for (const name of listed) assert.ok(bundled[name] !== undefined, `${name} is not in the bundle`);
    const kc = new (bundled.KubeConfig as new () => { loadFromString(s: string): void; getCurrentCluster(): { server: string } | null })();
    kc.loadFromString('{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":"https://192.0.2.1:6443"}}],"users":[{"name":"u","user":{"token":"t"}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}');
    assert.equal(kc.getCurrentCluster()?.server, 'https://192.0.2.1:6443');
  });
});
