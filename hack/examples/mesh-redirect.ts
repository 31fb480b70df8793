#!/usr/bin/env node
// An example kni extension: a service mesh's "CNI" part. For every pod kni attaches it installs,
// inside the pod's netns, a redirect of the pod's outbound TCP to a local port (where a mesh's
// sidecar would listen, as istio-cni does), and removes it when the pod is detached. It serves
// kni.extension.v1 on its own unix socket and registers with kni over kni's API.
//   node dist/hack/examples/mesh-redirect.js --socket /run/mesh/ext.sock --kni-socket /run/kni/kni.sock
// Deployed as a DaemonSet: kind-config/mesh-redirect-daemonset.yaml.
import * as grpc from '@grpc/grpc-js';
import { Command } from 'commander';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';
import { runtimeClient } from '../../plugin/client/clients';
import { extensionService } from '../../plugin/server/protos';

const run = promisify(execFile);

const opts = new Command()
  .option('--socket <path>', 'where this extension serves', '/run/mesh-redirect/ext.sock')
  .option('--kni-socket <path>', "kni's socket, to register", '/run/kni/kni.sock')
  .option('--name <name>', 'registration name', 'mesh-redirect')
  .option('--port <port>', 'the local port outbound TCP is redirected to', '15001')
  .option('--order <n>', 'order among extensions', '100')
  .option('--timeout-ms <n>', 'per-call timeout kni applies', '5000')
  .option('--fail-file <path>', 'testing: while this file exists, PodAttached fails with its content')
  .option('--hang-file <path>', 'testing: while this file exists, PodAttached never answers')
  .parse()
  .opts<{ socket: string; kniSocket: string; name: string; port: string; order: string; timeoutMs: string; failFile?: string; hangFile?: string }>();

const rule = ['-p', 'tcp', '!', '-d', '127.0.0.0/8', '-m', 'comment', '--comment', 'mesh-redirect', '-j', 'REDIRECT', '--to-ports', opts.port];
const inPod = (netns: string, args: string[]) => run('nsenter', [`--net=${netns}`, 'iptables', '-w', '5', '-t', 'nat', ...args]);
const log = (msg: string, fields: Record<string, unknown> = {}) => process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), msg, ...fields })}\n`);

const handlers: grpc.UntypedServiceImplementation = {
  PodAttached: (call: grpc.ServerUnaryCall<any, unknown>, cb: grpc.sendUnaryData<unknown>) => {
    const { netns_path: netns, sandbox_id: id } = call.request;
    if (opts.hangFile && fs.existsSync(opts.hangFile)) return; // never answers
    if (opts.failFile && fs.existsSync(opts.failFile)) return cb({ code: grpc.status.FAILED_PRECONDITION, details: fs.readFileSync(opts.failFile, 'utf8').trim() || 'failing on purpose' });
    inPod(netns, ['-C', 'OUTPUT', ...rule])
      .catch(() => inPod(netns, ['-A', 'OUTPUT', ...rule]))
      .then(() => {
        log('redirect installed', { sandbox: id, netns });
        cb(null, {});
      }, (e) => cb({ code: grpc.status.INTERNAL, details: `cannot install the redirect in ${netns}: ${String(e.stderr ?? e).trim()}` }));
  },
  PodDetached: (call: grpc.ServerUnaryCall<any, unknown>, cb: grpc.sendUnaryData<unknown>) => {
    // The netns may be gone already (and the rule with it): nothing to do then.
    inPod(call.request.netns_path, ['-D', 'OUTPUT', ...rule]).catch(() => undefined).then(() => cb(null, {}));
  },
  Check: (_call: grpc.ServerUnaryCall<unknown, unknown>, cb: grpc.sendUnaryData<unknown>) => cb(null, { healthy: true, message: '' }),
};

async function main(): Promise<void> {
  fs.rmSync(opts.socket, { force: true });
  const server = new grpc.Server();
  server.addService(extensionService().service, handlers);
  await new Promise<void>((resolve, reject) => server.bindAsync(`unix://${opts.socket}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
  fs.chmodSync(opts.socket, 0o600);
  log('serving', { socket: opts.socket });
  // Register (again: a registration replaces the older one of the same name), retrying until kni answers.
  for (let delay = 500; ; delay = Math.min(delay * 2, 10_000)) {
    const kni = runtimeClient(opts.kniSocket);
    try {
      // Its own pod (downward API): kni drops the registration once this pod is gone for good.
      const owner = process.env.POD_NAME ? { name: process.env.POD_NAME, namespace: process.env.POD_NAMESPACE, uid: process.env.POD_UID } : undefined;
      await kni.RegisterExtension({ name: opts.name, socket: opts.socket, order: Number(opts.order), events: ['attached', 'detached'], timeout_ms: Number(opts.timeoutMs), failure_policy: 'fail', owner });
      log('registered with kni', { kni: opts.kniSocket, name: opts.name });
      break;
    } catch (e) {
      log('cannot register with kni yet', { error: (e as grpc.ServiceError).details ?? String(e) });
      await new Promise((r) => setTimeout(r, delay));
    } finally {
      kni.close();
    }
  }
  process.once('SIGTERM', () => server.tryShutdown(() => process.exit(0)));
}

main().catch((e) => {
  process.stderr.write(`mesh-redirect: ${(e as Error).message}\n`);
  process.exit(1);
});
