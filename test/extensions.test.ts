// Extensions (kni.extension.v1) with the example mesh-redirect extension as a real process:
// a required extension gates readiness and attaches; once registered, every attach installs the
// redirect in the pod netns (a connection to any address lands on the local listener); a
// failing extension fails the attach with its message (an event too) until it recovers; a
// hanging one hits its timeout; registrations survive a kni restart; unregistering stops calls.
import assert from 'node:assert/strict';
import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { Client, watchEvents } from '../plugin/client/clients';
import { packageRoot } from '../plugin/server/protos';
import { rejectsWith } from './helpers/expect';
import { inNetns, RUN } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

describe('extensions: the example mesh-redirect', () => {
  let d: TestDaemon;
  let rt: Client;
  let ext: ChildProcess | undefined;
  let extOut = '';
  const dir = `/tmp/${RUN}-ext`;
  const socket = `${dir}/mesh.sock`;
  const failFile = `${dir}/fail`;
  const hangFile = `${dir}/hang`;
  const children: ChildProcess[] = [];

  before(async () => {
    fs.mkdirSync(dir, { recursive: true });
    d = await TestDaemon.start({ extensions: { required: ['mesh'] } });
    rt = d.rt();
  });
  after(() => {
    ext?.kill('SIGKILL');
    for (const c of children) c.kill('SIGKILL');
    d?.cleanup();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const attach = (id: string) => rt.Attach({ sandbox_id: id, netns_path: d.makePodNetns(id), pod: { name: id, namespace: 'mesh', uid: `u-${id}` } });
  function startExtension(): void {
    ext = spawn(process.execPath, [path.join(packageRoot(), 'dist/hack/examples/mesh-redirect.js'), '--socket', socket, '--kni-socket', d.socket, '--name', 'mesh', '--timeout-ms', '1500', '--fail-file', failFile, '--hang-file', hangFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    ext.stdout!.on('data', (b) => (extOut += b));
    ext.stderr!.on('data', (b) => (extOut += b));
  }

  it('a required extension not yet registered: node not ready (and why), attaches refused', async () => {
    const n = await rt.GetNode({});
    assert.equal(n.ready, false);
    assert.match(n.networks[0].reason, /waiting for required extension\(s\) mesh to register/);
    await rejectsWith(attach('m-early'), grpc.status.UNAVAILABLE, /no pods on this node yet: waiting for required extension\(s\) mesh/);
    // Waiting for an extension is nothing for reconcile to repair: no finding (one a minute, counted as drift, before).
    assert.deepEqual((await rt.Reconcile({})).findings, []);
  });

  it('once it registers, the node is ready and every attach gets the redirect: a connection to any address lands on the local listener', async () => {
    startExtension();
    await waitFor(async () => (await rt.GetNode({})).ready === true, 20_000, () => extOut);
    const p = await attach('m-a');
    const netns = p.netns_path;
    assert.match(inNetns(netns, 'iptables', ['-t', 'nat', '-S', 'OUTPUT']).out, /REDIRECT --to-ports 15001/);
    const listener = spawn('nsenter', [`--net=${netns}`, '/bin/busybox', 'nc', '-l', '-p', '15001'], { stdio: ['pipe', 'pipe', 'ignore'] });
    children.push(listener);
    let got = '';
    listener.stdout!.on('data', (b) => (got += b));
    await waitFor(() => inNetns(netns, 'ss', ['-ltn']).out.includes(':15001'), 10_000, () => 'listener never listened');
    inNetns(netns, '/bin/busybox', ['sh', '-c', 'echo hello-from-the-pod | /bin/busybox nc -w 2 203.0.113.9 80']);
    await waitFor(() => got.includes('hello-from-the-pod'), 10_000, () => `listener got ${JSON.stringify(got)}`);
    const list = (await rt.ListExtensions({})).extensions;
    assert.equal(list.length, 1);
    assert.equal(list[0].healthy, true);
    assert.ok(Number(list[0].calls) >= 2, 'Check at registration and PodAttached');
  });

  it('a failing extension fails the attach with its message and an extension_failed event; it recovers, the next attach succeeds', async () => {
    const events: any[] = [];
    const w = watchEvents(d.socket, {}, (e) => events.push(e), () => undefined);
    try {
      await w.opened;
      fs.writeFileSync(failFile, 'sidecar not ready');
      await rejectsWith(attach('m-fail'), grpc.status.UNAVAILABLE, /extension mesh failed for pod mesh\/m-fail: FAILED_PRECONDITION: sidecar not ready/);
      assert.equal((await rt.ListPods({})).pods.filter((p: any) => p.sandbox_id === 'm-fail').length, 0, 'the failed attach kept the pod');
      await waitFor(() => events.some((e) => e.type === 'extension_failed' && e.sandbox_id === 'm-fail'), 10_000, () => JSON.stringify(events));
      fs.rmSync(failFile);
      await rt.Attach({ sandbox_id: 'm-fail', netns_path: `/run/netns/${RUN}-m-fail`, pod: { name: 'm-fail', namespace: 'mesh', uid: 'u' } });
    } finally {
      w.close();
    }
  });

  it('a hanging extension hits its timeout: the attach fails saying so', async () => {
    fs.writeFileSync(hangFile, '');
    try {
      await rejectsWith(attach('m-hang'), grpc.status.UNAVAILABLE, /extension mesh failed .*no answer within 1500 ms/);
    } finally {
      fs.rmSync(hangFile);
    }
  });

  it('kni restarted: the registration is still there and still called; unregistering stops the calls', async () => {
    await d.restart('SIGKILL');
    rt = d.rt();
    const list = (await rt.ListExtensions({})).extensions;
    assert.deepEqual(list.map((x: any) => [x.name, x.socket]), [['mesh', socket]]);
    const p = await attach('m-after');
    assert.match(inNetns(p.netns_path, 'iptables', ['-t', 'nat', '-S', 'OUTPUT']).out, /REDIRECT/);
    assert.equal((await rt.UnregisterExtension({ name: 'mesh' })).removed, true);
    // Required and gone: not ready again.
    assert.equal((await rt.GetNode({})).ready, false);
    assert.equal((await rt.ListExtensions({})).extensions.length, 0);
  });

  it('registration is validated: bad names, relative sockets, unknown policies, unreachable extensions', async () => {
    await rejectsWith(rt.RegisterExtension({ name: 'Bad Name', socket: socket }), grpc.status.INVALID_ARGUMENT, /not a DNS label/);
    await rejectsWith(rt.RegisterExtension({ name: 'x', socket: 'rel.sock' }), grpc.status.INVALID_ARGUMENT, /extension socket "rel\.sock" must be an absolute path/);
    await rejectsWith(rt.RegisterExtension({ name: 'x', socket, failure_policy: 'maybe' }), grpc.status.INVALID_ARGUMENT, /failure_policy "maybe"/);
    await rejectsWith(rt.RegisterExtension({ name: 'x', socket: `${dir}/nobody.sock` }), grpc.status.FAILED_PRECONDITION, /did not pass its Check: unreachable/);
  });
});
