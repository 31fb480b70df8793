// kni's image, built here with no container engine (hack/build-image.sh): a valid OCI layout
// whose root filesystem runs the daemon, iptables and kni-cni on its own (in a chroot), and
// the Containerfile for users with an engine puts the same things at the same paths.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../plugin/server/protos';
import { RUN } from './helpers/sh';

describe('kni image', function () {
  this.timeout(180_000);
  const dir = `/tmp/${RUN}-image`;
  const root = `${dir}/rootfs`;
  let config: any;

  before(() => {
    fs.mkdirSync(`${dir}/layout`, { recursive: true });
    fs.mkdirSync(root, { recursive: true });
    execFileSync('bash', [path.join(packageRoot(), 'hack/build-image.sh'), `${dir}/kni.tar`, 'kni:test'], { stdio: 'pipe' });
    execFileSync('tar', ['-xf', `${dir}/kni.tar`, '-C', `${dir}/layout`]);
    const blob = (digest: string) => `${dir}/layout/blobs/sha256/${digest.split(':')[1]}`;
    const index = JSON.parse(fs.readFileSync(`${dir}/layout/index.json`, 'utf8'));
    assert.equal(index.manifests[0].annotations['io.containerd.image.name'], 'docker.io/library/kni:test', 'stored as CRI looks up the short name');
    const manifest = JSON.parse(fs.readFileSync(blob(index.manifests[0].digest), 'utf8'));
    config = JSON.parse(fs.readFileSync(blob(manifest.config.digest), 'utf8'));
    execFileSync('tar', ['-xf', blob(manifest.layers[0].digest), '-C', root]);
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('its root filesystem runs the daemon, iptables and kni-cni with nothing from the host', () => {
    const [exe, ...args] = config.config.Entrypoint as string[];
    const cfg = spawnSync('chroot', [root, exe, ...args, '--print-config'], { encoding: 'utf8' });
    assert.equal(cfg.status, 0, cfg.stderr);
    assert.equal(JSON.parse(cfg.stdout).bridge, 'kni0');
    // Which kni this is: the commit it was built from, as on the build machine.
    const version = spawnSync('chroot', [root, exe, ...args, '--version'], { encoding: 'utf8' });
    assert.equal(version.stdout.trim(), `kni-runtime 0.1.0 (commit ${JSON.parse(fs.readFileSync(path.join(packageRoot(), 'dist/build-info.json'), 'utf8')).commit})`);
    assert.doesNotMatch(version.stdout, /commit unknown/);
    assert.match(execFileSync('chroot', [root, '/usr/sbin/iptables', '--version'], { encoding: 'utf8' }), /nf_tables/);
    // chroot(8), for plugins found under defaultNetwork.chrootDir (here: the image's own root again).
    assert.match(execFileSync('chroot', [root, '/usr/sbin/chroot', '/', '/usr/local/bin/node', '--version'], { encoding: 'utf8' }), /^v\d+/);
    assert.match(execFileSync('chroot', [root, '/usr/sbin/ip6tables', '--version'], { encoding: 'utf8' }), /nf_tables/);
    // Both backends, each with its save and restore: kni writes with the node's (plugin/node/iptables.ts).
    for (const b of ['nft', 'legacy']) {
      for (const t of ['iptables', 'ip6tables']) for (const v of ['', '-save', '-restore']) assert.ok(fs.existsSync(`${root}/usr/sbin/${t}-${b}${v}`), `${t}-${b}${v} missing`);
      assert.match(execFileSync('chroot', [root, `/usr/sbin/iptables-${b}`, '--version'], { encoding: 'utf8' }), b === 'nft' ? /nf_tables/ : /legacy/);
    }
    // nft, read by knictl trace (kube-proxy's nftables mode).
    assert.match(execFileSync('chroot', [root, '/usr/sbin/nft', '--version'], { encoding: 'utf8' }), /^nftables v/);
    const shim = spawnSync('chroot', [root, '/app/dist/bin/kni-cni'], { encoding: 'utf8', env: { PATH: process.env.PATH, CNI_COMMAND: 'VERSION' } });
    assert.match(shim.stdout, /"supportedVersions"/);
    // koffi, which the netlink code calls libc through, loads with the image's own C library.
    const koffi = spawnSync('chroot', [root, exe, '-e', "require('/app/dist/plugin/sys/libc.js')"], { encoding: 'utf8' });
    assert.equal(koffi.status, 0, koffi.stderr);
    assert.ok(!fs.existsSync(`${root}/app/node_modules/mocha`), 'dev dependencies in the image');
    // The CNI reference plugins run from the image (for defaultNetwork.cni).
    const bridge = spawnSync('chroot', [root, '/usr/lib/cni/bridge'], { encoding: 'utf8', input: '{"cniVersion":"1.0.0"}', env: { PATH: process.env.PATH, CNI_COMMAND: 'VERSION' } });
    assert.match(bridge.stdout, /"supportedVersions"/, bridge.stderr);
    // The commands by name, as kubectl exec runs them.
    const byName = (c: string, arg: string) => spawnSync('chroot', [root, `/usr/local/bin/${c}`, arg], { encoding: 'utf8', env: { PATH: process.env.PATH } });
    assert.match(byName('knictl', '--help').stdout, /^Usage: knictl/);
    assert.equal(byName('kni-runtime', '--version').stdout, version.stdout);
  });

  it('the Containerfile is equivalent: same entrypoint and environment, same paths under /app, iptables installed', () => {
    const cf = fs.readFileSync(path.join(packageRoot(), 'kind-config/Containerfile'), 'utf8');
    assert.equal(JSON.stringify(JSON.parse(/^ENTRYPOINT (.*)$/m.exec(cf)![1])), JSON.stringify(config.config.Entrypoint));
    assert.deepEqual([...cf.matchAll(/^ENV (\S+)$/gm)].map((m) => m[1]).sort(), [...(config.config.Env as string[])].sort());
    const copied = [...cf.matchAll(/^COPY --from=build \S+ (\S+)$/gm)].map((m) => m[1]).sort();
    const inImage = ['/app/package.json', '/app/node_modules', '/app/proto', '/app/dist/plugin', '/app/dist/runtime-hooks', '/app/dist/bin/kni-cni', '/app/dist/hack/examples', '/app/dist/build-info.json'];
    for (const p of inImage) assert.ok(fs.existsSync(`${root}${p}`), `${p} missing from the built image`);
    assert.deepEqual(copied, [...inImage].sort());
    assert.match(cf, /apt-get install .*iptables/);
    assert.match(cf, /apt-get install .*nftables/);
    assert.match(cf, /apt-get install .*containernetworking-plugins/);
    for (const c of ['knictl', 'kni-runtime']) assert.match(cf, new RegExp(`> /usr/local/bin/${c} `));
  });
});
