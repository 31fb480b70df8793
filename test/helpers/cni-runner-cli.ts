// Runs one CniNetwork operation in this process's netns (the test starts it inside a node
// netns with nsenter, so plugins touch that netns only): argv[2] is a JSON request, stdout the
// JSON answer. A new process per call, as a kni restart between ADD and DEL would be.
import { CniResultCache } from '../../plugin/cni/cni-result-cache';
import { parseNetworkConfig } from '../../plugin/cni/conflist';
import { CniNetwork, convertResult } from '../../plugin/cni/cni-network';
import { CniPluginError } from '../../plugin/cni/plugin-exec';

async function main(): Promise<void> {
  const req = JSON.parse(process.argv[2]);
  if (req.op === 'convert') return void process.stdout.write(JSON.stringify({ ok: true, result: convertResult(req.result, req.to) }));
  const net = new CniNetwork(parseNetworkConfig(req.conflist, 'test'), { binDirs: req.binDirs, chrootDir: req.chrootDir }, new CniResultCache(req.cacheDir));
  let result: unknown;
  switch (req.op) {
    case 'add': result = await net.add(req.rt); break;
    case 'del': await net.del(req.rt); break;
    case 'check': await net.check(req.rt); break;
    case 'status': await net.status(); break;
    case 'gc': result = await net.gc(req.valid); break;
    default: throw new Error(`unknown op ${req.op}`);
  }
  process.stdout.write(JSON.stringify({ ok: true, result }));
}

main().catch((e) => {
  const err = e instanceof CniPluginError ? { plugin: e.plugin, code: e.code, msg: e.msg, details: e.details } : { msg: (e as Error).message };
  process.stdout.write(JSON.stringify({ ok: false, error: err }));
});
