// The whoami pods of the node-agent cluster tests: pinned to a node, answering HTTP with the
// address they were reached from (busybox httpd CGI: REMOTE_ADDR), so a test sees whether the
// source address survived the trip.
import { kubectl, kubectlJson } from './cluster-helpers';

export const WHOAMI = (name: string, nodeName: string, labels = 'app: whoami') => `apiVersion: v1
kind: Pod
metadata: {name: ${name}, labels: {${labels}}}
spec:
  nodeName: ${nodeName}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: kni.local/e2e:1
    imagePullPolicy: Never
    command: ["/bin/busybox", "sh", "-c", "mkdir -p /www/cgi-bin && printf '#!/bin/sh\\\\necho Content-Type: text/plain\\\\necho\\\\necho from=$REMOTE_ADDR\\\\n' > /www/cgi-bin/ip && chmod +x /www/cgi-bin/ip && exec /bin/busybox httpd -f -p 80 -h /www"]
`;

export const podIps = (name: string): string[] => kubectlJson('get', 'pod', name).status.podIPs.map((x: any) => x.ip);
export const running = (name: string) => {
  try {
    return kubectlJson('get', 'pod', name).status.phase === 'Running';
  } catch {
    return false;
  }
};
/** GET /cgi-bin/ip from inside pod `from` to address `to`: the address the server saw. */
export function fetchFrom(from: string, to: string): string {
  const host = to.includes(':') ? `[${to}]` : to;
  let out: string;
  try {
    out = kubectl('exec', from, '--', '/bin/busybox', 'sh', '-c', `printf 'GET /cgi-bin/ip HTTP/1.0\\r\\nHost: ${host}\\r\\n\\r\\n' | /bin/busybox nc -w 5 ${to} 80`);
  } catch (e) {
    out = String((e as { stderr?: string }).stderr ?? e);
  }
  const seen = /from=(\S+)/.exec(out)?.[1];
  // busybox httpd listens on one dual-stack socket: IPv4 peers show as [::ffff:a.b.c.d].
  return seen ? seen.replace(/^\[|\]$/g, '').replace(/^::ffff:(?=\d+\.)/, '') : `(no answer: ${out.slice(0, 200)})`;
}
