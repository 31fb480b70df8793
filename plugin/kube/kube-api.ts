// kni's connection to the Kubernetes API (@kubernetes/client-node): the in-cluster service
// account, or a kubeconfig (the config's kubernetes.kubeconfig, else $KUBECONFIG) when run by
// hand. The library is loaded only when Kubernetes is configured, and as the build's bundle of
// what kni uses of it (k8s-client.ts says why).
import fs from 'node:fs';
import path from 'node:path';
import type * as K8s from '@kubernetes/client-node';

/** The library's values kni uses (k8s-client.ts). */
export type K8sClient = typeof import('./k8s-client');

export interface KubeApi {
  k8s: K8sClient;
  kc: K8s.KubeConfig;
  core: K8s.CoreV1Api;
  /** Where the credentials came from (for logs and knictl node). */
  source: string;
}

export function connectKube(kubeconfig: string): KubeApi {
  const k8s = loadClient();
  const kc = new k8s.KubeConfig();
  const file = kubeconfig || process.env.KUBECONFIG || '';
  if (file) {
    try {
      kc.loadFromFile(file);
    } catch (e) {
      // The parser's message alone ("unexpected end of the stream …") names no file.
      throw new Error(`kubeconfig ${file} cannot be read: ${(e as Error).message.split('\n')[0]}`);
    }
  } else if (process.env.KUBERNETES_SERVICE_HOST) kc.loadFromCluster();
  else throw new Error('no Kubernetes credentials: not in a pod (KUBERNETES_SERVICE_HOST unset) and no kubeconfig (kubernetes.kubeconfig or KUBECONFIG)');
  if (!kc.getCurrentCluster()) throw new Error(`kubeconfig ${file}: no current cluster`);
  return { k8s, kc, core: kc.makeApiClient(k8s.CoreV1Api), source: file || 'in-cluster service account' };
}

function loadClient(): K8sClient {
  const bundle = path.join(__dirname, 'k8s-client.bundle.js');
  if (!fs.existsSync(bundle)) throw new Error(`${bundle} is missing: build kni with npm run build (hack/setup.sh does)`);
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require(bundle) as K8sClient;
}

/** An API error as one line: the HTTP status and the Status message when there is one. */
export function apiError(e: unknown): string {
  const err = e as { code?: number; body?: unknown; message?: string };
  let detail = '';
  try {
    const body = typeof err.body === 'string' ? JSON.parse(err.body) : err.body;
    detail = (body as { message?: string })?.message ?? '';
  } catch {
    // not a Status
  }
  const text = detail || err.message || String(e);
  return (typeof err.code === 'number' ? `HTTP ${err.code}: ${text}` : text).split('\n')[0].slice(0, 500);
}

export const isConflict = (e: unknown): boolean => (e as { code?: number }).code === 409;
export const isNotFound = (e: unknown): boolean => (e as { code?: number }).code === 404;

/** A promise that gives up after ms (the library has no request timeout of its own). */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer from the API server within ${ms / 1000} s`)), ms);
      timer.unref();
    }),
  ]);
}
