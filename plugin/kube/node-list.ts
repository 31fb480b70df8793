// Every Node, as the API server sends them: a GET of /api/v1/nodes parsed with JSON.parse,
// through client-node's own connection settings (KubeConfig.applyToHTTPSOptions: its TLS,
// token or client certificate), but not through its generated CoreV1Api.listNode.
// Why by hand: listNode parses the body and then copies the whole tree into its model classes
// (ObjectSerializer.deserialize), and every kni lists every Node at start. With 5,000 Nodes of
// 12 kB (a 60 MB list), measured here: listNode's parse and copy 1.0 s on the event loop and
// ≈ 175 MB above the body; JSON.parse alone 0.4 s and ≈ 100 MB. The watch after it already
// hands out plain objects (client-node's Watch uses JSON.parse), so the informer's cache holds
// one kind of object either way.
import http from 'node:http';
import https from 'node:https';
import zlib from 'node:zlib';
import type * as K8s from '@kubernetes/client-node';
import { KubeApi } from './kube-api';

/** A list of Nodes larger than this much JSON is refused (≈ 50 kB for each of 10,000 Nodes). */
const MAX_BYTES = 512 << 20;
const TIMEOUT_MS = 60_000;

/**
 * The NodeList, from the API server's watch cache when resourceVersion is "0" (else from
 * etcd). An HTTP error rejects with { code, body } as client-node's ApiException carries them
 * (apiError reads both).
 */
export async function listNodes(api: KubeApi, resourceVersion?: string): Promise<K8s.V1NodeList> {
  const cluster = api.kc.getCurrentCluster();
  if (!cluster) throw new Error('no current cluster in the kubeconfig');
  const url = new URL(`${cluster.server.replace(/\/+$/, '')}/api/v1/nodes`);
  if (resourceVersion !== undefined) url.searchParams.set('resourceVersion', resourceVersion);
  // gzip, as client-node's fetch and client-go ask: the API server compresses large answers,
  // and the whole Node table goes to every node at once in a rollout (≈ 10× less to send).
  const opts: https.RequestOptions = { headers: { Accept: 'application/json', 'Accept-Encoding': 'gzip' }, timeout: TIMEOUT_MS };
  await api.kc.applyToHTTPSOptions(opts);
  const get = url.protocol === 'http:' ? http.get : https.get;
  return new Promise((resolve, reject) => {
    const req = get(url, opts, (res) => {
      const chunks: Buffer[] = [];
      let bytes = 0;
      // Inflated in libuv's thread pool, off the event loop.
      const body = res.headers['content-encoding'] === 'gzip' ? res.pipe(zlib.createGunzip()) : res;
      body.on('data', (c: Buffer) => {
        bytes += c.length;
        if (bytes > MAX_BYTES) {
          req.destroy(new Error(`the Node list is over ${MAX_BYTES >> 20} MiB`));
          return;
        }
        chunks.push(c);
      });
      res.on('error', reject);
      body.on('error', (e) => reject(new Error(`the Node list's gzip body: ${e.message}`)));
      body.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        if (res.statusCode !== 200) {
          reject(Object.assign(new Error(`HTTP ${res.statusCode} listing Nodes`), { code: res.statusCode, body: text }));
          return;
        }
        try {
          const list = JSON.parse(text) as K8s.V1NodeList;
          if (!Array.isArray(list?.items)) throw new Error('no items');
          resolve(list);
        } catch (e) {
          reject(new Error(`the Node list is not a NodeList: ${(e as Error).message}`));
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error(`list Nodes: no answer from the API server within ${TIMEOUT_MS / 1000} s`)));
    req.on('error', reject);
  });
}
