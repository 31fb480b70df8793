// The Node list kni reads by hand (plugin/kube/node-list.ts), against a local HTTP server that
// answers as the API server does: the path and query asked, the credentials client-node's
// KubeConfig gives, a NodeList parsed as sent, errors as client-node reports them. A real API
// server lists Nodes for it in the cluster tests (node-agent.cluster, node-ipam.cluster).
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import * as k8s from '@kubernetes/client-node';
import { apiError, KubeApi } from '../plugin/kube/kube-api';
import { listNodes } from '../plugin/kube/node-list';

describe('the Node list (by hand, as the API server sends it)', () => {
  let server: http.Server;
  let api: KubeApi;
  let answer: (req: http.IncomingMessage, res: http.ServerResponse) => void = () => undefined;
  const seen: { url: string; auth: string }[] = [];

  before(async () => {
    server = http.createServer((req, res) => {
      seen.push({ url: req.url ?? '', auth: req.headers.authorization ?? '' });
      answer(req, res);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const kc = new k8s.KubeConfig();
    // A path prefix, as behind a proxy: kept in front of /api.
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: `http://127.0.0.1:${(server.address() as AddressInfo).port}/prefix/`, skipTLSVerify: true }],
      users: [{ name: 'u', token: 'the-token' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    api = { k8s, kc, core: kc.makeApiClient(k8s.CoreV1Api), source: 'test' };
  });
  after(() => server?.close());

  it('GETs /api/v1/nodes with the watch cache\'s resourceVersion and the kubeconfig\'s token, and hands back the NodeList as sent', async () => {
    const node = { metadata: { name: 'n1', resourceVersion: '7', creationTimestamp: '2026-01-01T00:00:00Z' }, spec: { podCIDRs: ['10.9.0.0/24'] }, status: { addresses: [{ type: 'InternalIP', address: '172.20.0.1' }] } };
    answer = (_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'NodeList', apiVersion: 'v1', metadata: { resourceVersion: '42' }, items: [node] }));
    seen.length = 0;
    const list = await listNodes(api, '0');
    assert.deepEqual(seen, [{ url: '/prefix/api/v1/nodes?resourceVersion=0', auth: 'Bearer the-token' }]);
    assert.equal(list.metadata?.resourceVersion, '42');
    // Plain JSON, as the watch's events are: no model copy (a timestamp stays text).
    assert.deepEqual(list.items, [node]);
    await listNodes(api);
    assert.equal(seen[1].url, '/prefix/api/v1/nodes', 'no resourceVersion: a read from etcd');
  });

  it('asks for gzip, as the API server compresses a large list, and inflates it', async () => {
    const items = Array.from({ length: 300 }, (_, i) => ({ metadata: { name: `n${i}` }, status: { images: Array.from({ length: 20 }, () => ({ names: ['registry.example/image@sha256:' + 'a'.repeat(64)] })) } }));
    let asked = '';
    answer = (req, res) => {
      asked = String(req.headers['accept-encoding']);
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' }).end(zlib.gzipSync(JSON.stringify({ kind: 'NodeList', metadata: { resourceVersion: '5' }, items })));
    };
    const list = await listNodes(api, '0');
    assert.equal(asked, 'gzip');
    assert.deepEqual(list.items, items);
    answer = (_req, res) => res.writeHead(200, { 'content-encoding': 'gzip' }).end('not gzip');
    await assert.rejects(listNodes(api, '0'), /the Node list's gzip body: /);
  });

  it('an HTTP error rejects as client-node\'s do (its status and the Status message: apiError), and a body that is no NodeList says so', async () => {
    answer = (_req, res) => res.writeHead(403, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'Status', status: 'Failure', message: 'nodes is forbidden: User "x" cannot list resource "nodes"', code: 403 }));
    const err = await listNodes(api, '0').then(() => assert.fail('a 403 listed'), (e) => e);
    assert.equal(err.code, 403);
    assert.equal(apiError(err), 'HTTP 403: nodes is forbidden: User "x" cannot list resource "nodes"');
    answer = (_req, res) => res.writeHead(200).end('{"kind":"Status"');
    await assert.rejects(listNodes(api, '0'), /^Error: the Node list is not a NodeList: /);
    answer = (_req, res) => res.writeHead(200).end('{"kind":"NodeList"}');
    await assert.rejects(listNodes(api, '0'), /the Node list is not a NodeList: no items/);
  });
});
