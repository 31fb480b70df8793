#!/usr/bin/env node
// knictl: look at what kni-runtime holds on this node.
import { printable } from './client/terminal-text';
import * as grpc from '@grpc/grpc-js';
import { Command, Option } from 'commander';
import fs from 'node:fs';
import { Client, listAllPods, runtimeClient, watchEvents } from './client/clients';
import { matchSandbox, SANDBOX_REF_HELP } from './client/sandbox-ref';
import { BUILD, versionText } from './version';

const program = new Command()
  .name('knictl')
  .description('inspect the kni network runtime on this node')
  .option('--socket <path>', 'kni-runtime socket', process.env.KNI_SOCKET ?? '/run/kni/kni.sock')
  .version(`knictl ${versionText()}`, '--version', "print knictl's version and exit");

const output = () => new Option('-o, --output <format>', 'table or json').choices(['table', 'json']).default('table');

/** The --socket path, once it is a socket knictl may use (else the reason, and exit 1). */
function usableSocket(): string {
  const socket = program.opts<{ socket: string }>().socket;
  if (!fs.existsSync(socket)) fail(`kni-runtime is not running: no socket at ${socket} (start it with kni-runtime, or pass --socket)`);
  if (!fs.statSync(socket).isSocket()) fail(`${socket} is not a socket: pass kni-runtime's --socket path`);
  try {
    fs.accessSync(socket, fs.constants.R_OK | fs.constants.W_OK);
  } catch {
    fail(`permission denied on ${socket}: the kni socket is root-only (0600); run knictl as root`);
  }
  return socket;
}

async function withClient<T>(fn: (c: Client) => Promise<T>): Promise<T> {
  const socket = usableSocket();
  const c = runtimeClient(socket);
  try {
    return await fn(c);
  } catch (e) {
    const err = e as grpc.ServiceError;
    if (err.code === grpc.status.UNAVAILABLE) fail(`kni-runtime is not running: cannot connect to ${socket} (${err.details})`);
    if (err.code !== undefined) fail(`${grpc.status[err.code]}: ${err.details}`);
    throw e;
  } finally {
    c.close();
  }
}

/** The sandbox id a command-line reference names (sandbox-ref.ts); a whole CRI id needs no lookup. */
async function sandboxOf(c: Client, ref: string, unmatchedAsGiven = false): Promise<string> {
  if (/^[0-9a-f]{64}$/.test(ref)) return ref;
  const m = matchSandbox(await listAllPods(c), ref);
  return 'id' in m ? m.id : unmatchedAsGiven && !m.matches ? ref : fail(m.error);
}

function fail(msg: string): never {
  process.stderr.write(`knictl: ${msg}\n`);
  process.exit(1);
}

function table(rows: string[][]): string {
  const safe = rows.map((r) => r.map((c) => printable(c)));
  const widths = safe[0].map((_, i) => Math.max(...safe.map((r) => r[i].length)));
  return safe.map((r) => r.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n') + '\n';
}

const print = (format: string, json: unknown, human: () => string) =>
  process.stdout.write(format === 'json' ? `${JSON.stringify(json, null, 2)}\n` : printable(human()));

const ips = (p: any): string => p.interfaces.flatMap((i: any) => i.addresses.map((a: any) => a.address)).join(',');
/** CRI ids (64 hex digits) are shown as crictl does, by their first 13; others whole. */
const shortId = (id: string): string => (/^[0-9a-f]{64}$/.test(id) ? id.slice(0, 13) : id);
const podName = (p: any): string => (p.pod?.name ? `${p.pod.namespace}/${p.pod.name}` : '-');

program.command('pods').description('list the sandboxes kni has wired').addOption(output()).action(async (o) => {
  const pods = await withClient((c) => listAllPods(c));
  print(o.output, pods, () =>
    table([['SANDBOX', 'POD', 'IPS', 'NETNS'], ...pods.map((p: any) => [shortId(p.sandbox_id), podName(p), ips(p), p.netns_path])]),
  );
});

program.command('pod <sandbox>').description(`one sandbox's network: interfaces, addresses, routes (sandbox: ${SANDBOX_REF_HELP})`).addOption(output()).action(async (ref, o) => {
  const p = await withClient(async (c) => c.GetPod({ sandbox_id: await sandboxOf(c, ref) }));
  print(o.output, p, () => {
    let s = `sandbox:  ${p.sandbox_id}\npod:      ${podName(p)}${p.pod?.uid ? ` (uid ${p.pod.uid})` : ''}\nkind:     ${p.kind}${p.runtime_handler ? ` (handler ${p.runtime_handler})` : ''}\nnetns:    ${p.netns_path}\ncreated:  ${p.created_at}\n`;
    for (const i of p.interfaces) {
      const network = i.network ? `network ${i.network}${i.selected_by ? ` (by ${i.selected_by})` : ''}` : `default network${i.default_network ? ` ${i.default_network} (the pod's choice)` : ''}`;
      s += `interface ${i.name}: ${network}${i.default ? ', default route' : ''}; mac ${i.mac || '-'} mtu ${i.mtu}${i.host_interface ? ` host ${i.host_interface}` : ''}${i.vm_tap ? ` vm tap ${i.vm_tap}` : ''}${i.device_id ? ` device ${i.device_id}` : ''}\n`;
      for (const a of i.addresses) s += `  ${a.family} ${a.address}/${a.prefix_length} gateway ${a.gateway}\n`;
      for (const n of i.neighbors ?? []) s += `  neighbour ${n.address} lladdr ${n.mac} (permanent)\n`;
      if (i.dns) s += `  dns${dnsText(i.dns)}\n`;
    }
    s += 'routes:\n';
    for (const r of p.routes) s += `  ${r.destination}${r.gateway ? ` via ${r.gateway}` : ''} dev ${r.interface}\n`;
    return s;
  });
});

/** A CNI network's DNS settings on one line: each part that is set, as resolv.conf names it. */
const dnsText = (d: any): string =>
  [['nameserver', d.nameservers?.join(' ')], ['domain', d.domain], ['search', d.search?.join(' ')], ['options', d.options?.join(' ')]]
    .filter(([, v]) => v)
    .map(([k, v]) => ` ${k} ${v}`)
    .join(';');

/** Above this many peers, knictl node lists only those with a route not installed (--all-peers: every one). */
const PEERS_LISTED = 40;

function clusterText(c: any, allPeers: boolean): string {
  const api = c.api ?? {};
  const lines = [
    `node: ${c.node_name}`,
    `pod CIDRs of the Node${c.pod_cidrs_source ? ` (${c.pod_cidrs_source})` : ''}: ${c.node_pod_cidrs.join(',') || '-'}   ranges in use: ${c.ranges.join(',') || '-'}${c.ranges_problem ? `   problem: ${c.ranges_problem}` : ''}`,
    `backend: ${c.backend}`,
    `API server: ${api.connected ? 'connected' : `NOT CONNECTED${api.error ? ` (${api.error})` : ''}`} via ${api.source}, watch restarts: ${api.watch_restarts ?? 0}`,
    '',
  ].join('\n');
  const routesOf = (p: any): any[] => (p.routes.length ? p.routes : [{ destination: p.pod_cidrs.join(',') || '-', backend: '', via: '', state: 'none', error: p.pod_cidrs.length ? '' : 'no podCIDRs' }]);
  const states = new Map<string, number>();
  for (const p of c.peers) for (const r of routesOf(p)) states.set(r.state, (states.get(r.state) ?? 0) + 1);
  const probes = new Map<string, number>();
  for (const p of c.peers) for (const r of p.routes) if (r.probe) probes.set(r.probe, (probes.get(r.probe) ?? 0) + 1);
  const summary = `peers: ${c.peers.length} node(s); routes: ${[...states].map(([st, n]) => `${n} ${st}`).join(', ') || 'none'}${probes.size ? `; probes: ${[...probes].map(([st, n]) => `${n} ${st}`).join(', ')}` : ''}`;
  // A probe that does not get through is a problem as much as a route not installed: any state
  // but the two probeWorks takes (peer-probe.ts, not imported here: it loads the node's libc).
  const probeBad = (r: any): boolean => !!r.probe && r.probe !== 'answers' && r.probe !== 'refused';
  // In a large cluster the routes that are in place would bury the ones that are not.
  const shown = allPeers || c.peers.length <= PEERS_LISTED ? c.peers : c.peers.filter((p: any) => routesOf(p).some((r) => r.state !== 'installed' || probeBad(r)));
  const hidden = c.peers.length - shown.length;
  const probeText = (r: any): string => (!r.probe ? '-' : probeBad(r) ? `${r.probe.toUpperCase()} since ${r.probe_since.slice(11, 19)}` : `${r.probe} ${Number(r.probe_ms).toFixed(1)} ms`);
  const rows = shown.flatMap((p: any) => routesOf(p).map((r: any) => [p.name, p.internal_ips.join(','), r.destination, r.backend || '-', r.via || '-', r.state, probeText(r), r.error || (probeBad(r) ? r.probe_detail : '') || '-']));
  return `${lines}${summary}\n${rows.length ? table([['PEER', 'INTERNAL IPS', 'DESTINATION', 'BACKEND', 'VIA', 'STATE', 'PROBE', 'PROBLEM'], ...rows]) : ''}${hidden ? `(${hidden} peer(s) with every route installed and answering not listed: --all-peers lists them)\n` : ''}`;
}

program.command('networks').description('network definitions kni knows (NetworkAttachmentDefinitions, networks.dir), where each came from, and the pods using it').addOption(output()).action(async (o) => {
  const r = await withClient((c) => c.ListNetworks({}));
  print(o.output, r.networks, () =>
    table([['NETWORK', 'SOURCE', 'PLUGINS', 'RESOURCE', 'ATTACHMENTS', 'PROBLEM'], ...r.networks.map((n: any) => [
      `${n.namespace}/${n.name}`, n.source, n.plugins.join(',') || '-', n.resource_name || '-', String(n.attachments.length), n.valid ? '-' : n.error,
    ])]) + r.networks.filter((n: any) => n.attachments.length).map((n: any) =>
      `${n.namespace}/${n.name}: ${n.attachments.map((a: string) => shortId(a.split('/')[0]) + '/' + a.split('/')[1]).join(' ')}${n.pods.length ? ` (pods ${n.pods.join(' ')})` : ''}\n`).join(''),
  );
});

program
  .command('attach-network <sandbox> <network>')
  .description(`add a secondary network to a running sandbox (sandbox: ${SANDBOX_REF_HELP}; network: namespace/name or name)`)
  .option('--interface <name>', 'pod interface name (default: the first free net<N>)')
  .option('--ip <address...>', 'address(es) for the network\'s IPAM (IP or CIDR)')
  .option('--mac <mac>', 'MAC address of the new interface')
  .option('--default-route <gateway...>', "the pod's default route goes through this network")
  .option('--device-id <id>', 'a device for the attachment (the deviceID capability, as a Multus selection\'s deviceID)')
  .option('--infiniband-guid <guid>', 'an InfiniBand GUID for the attachment (the infinibandGUID capability)')
  .option('--cni-args <json>', 'a JSON object given to every plugin as args.cni (as a Multus selection\'s cni-args)')
  .option('--port-mappings <json>', 'host ports for plugins declaring portMappings, as a Multus selection\'s: [{"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":"…"}]')
  .option('--bandwidth <json>', 'limits for plugins declaring bandwidth, as a Multus selection\'s: {"ingressRate":…,"ingressBurst":…,"egressRate":…,"egressBurst":…} (bits/s, bits)')
  .addOption(output())
  .action(async (ref, network, o) => {
    const p = await withClient(async (c) => c.AttachNetwork({
      sandbox_id: await sandboxOf(c, ref), network, interface_name: o.interface ?? '', ips: o.ip ?? [], mac: o.mac ?? '', default_route: o.defaultRoute ?? [],
      device_id: o.deviceId ?? '', infiniband_guid: o.infinibandGuid ?? '', cni_args_json: o.cniArgs ?? '', port_mappings_json: o.portMappings ?? '', bandwidth_json: o.bandwidth ?? '',
    }));
    print(o.output, p, () => `${p.interfaces.map((i: any) => `${i.name}\t${i.network || 'default'}\t${i.addresses.map((a: any) => a.address).join(',')}`).join('\n')}\n`);
  });

program.command('detach-network <sandbox> <interface>').description(`remove a secondary network's interface from a running sandbox (sandbox: ${SANDBOX_REF_HELP})`).action(async (ref, itf) => {
  let id = ref;
  const r = await withClient(async (c) => c.DetachNetwork({ sandbox_id: (id = await sandboxOf(c, ref)), interface_name: itf }));
  process.stdout.write(r.removed ? `removed ${itf}\n` : `sandbox ${shortId(id)} has no interface ${itf}\n`);
});

/** The CNI network kni runs as the default network, and how. */
function defaultCniText(d: { file: string; name: string; cni_version: string; plugins: string[]; auto: boolean; chroot_dir: string; readiness_indicator_file: string }): string {
  return `default network: ${d.name} (CNI ${d.cni_version}) from ${d.file}${d.auto ? ' (found by defaultNetwork.cni: auto)' : ''}: ${d.plugins.join(' → ')}\n` +
    (d.chroot_dir ? `  plugins found under ${d.chroot_dir} run chrooted there\n` : '') +
    (d.readiness_indicator_file ? `  ready once ${d.readiness_indicator_file} exists\n` : '');
}

program.command('node').description('node networks, readiness, and (in Kubernetes) pod CIDRs, peers and their routes').addOption(output()).option('--all-peers', `list every peer, also beyond ${PEERS_LISTED} whose routes are all installed`).action(async (o) => {
  const n = await withClient((c) => c.GetNode());
  print(o.output, n, () =>
    `ready: ${n.ready}\n` +
    table([['NETWORK', 'READY', 'BRIDGE', 'POD LINK', 'MTU', 'RANGES', 'REASON'], ...n.networks.map((x: any) => [x.name, String(x.ready), x.bridge, x.pod_link || '-', String(x.mtu), x.ranges.join(','), x.reason || '-'])]) +
    n.networks.map((x: any) => `masquerade (${x.name}): ${x.masquerade ? `on, but to the cluster's pod CIDRs${x.non_masquerade_cidrs?.length ? ` and ${x.non_masquerade_cidrs.join(', ')}` : ''}` : 'off'}\n`).join('') +
    (n.cni_config ? `CNI config: ${n.cni_config.file} (CNI ${n.cni_config.cni_version}): ${n.cni_config.plugins.join(' → ')}\n` : '') +
    (n.default_cni ? defaultCniText(n.default_cni) : '') +
    (n.warnings?.length ? `\nwarnings:\n${n.warnings.map((w: string) => `- ${w}\n`).join('')}` : '') +
    (n.repairs?.length ? `\nput back lately (found undone on the node):\n${n.repairs.map((r: { time: string; what: string }) => `- ${r.time}  ${r.what}\n`).join('')}` : '') +
    (n.cluster ? `\n${clusterText(n.cluster, !!o.allPeers)}` : ''),
  );
});

program.command('version').description("knictl's version and the version of the kni-runtime it talks to").addOption(output()).action(async (o) => {
  const server = await withClient((c) => c.Version({}));
  print(o.output, { client: BUILD, server }, () => `knictl:      ${versionText()}\nkni-runtime: ${versionText(server)}, API ${server.api_version}, started ${server.started_at}\n`);
});

program.command('ipam').description('pod range usage').addOption(output()).action(async (o) => {
  const s = await withClient((c) => c.GetIPAMStatus());
  print(o.output, s, () =>
    table([['RANGE', 'FAMILY', 'SIZE', 'USED', 'FREE', 'EXHAUSTED'], ...s.ranges.map((r: any) => [r.cidr, r.family, r.size, r.used, r.free, String(r.exhausted)])]),
  );
});

program.command('check [sandbox]').description(`compare a sandbox's record with the kernel, changing nothing (sandbox: ${SANDBOX_REF_HELP}); without one, the node and every sandbox`).addOption(output()).action(async (ref, o) => {
  if (ref !== undefined) {
    const r = await withClient(async (c) => c.Check({ sandbox_id: await sandboxOf(c, ref) }));
    print(o.output, r, () => (r.ok ? 'ok\n' : r.problems.map((p: string) => `problem: ${p}\n`).join('')));
    if (!r.ok) process.exitCode = 2;
    return;
  }
  // Where to start when networking breaks on a node: its readiness and warnings, then each pod.
  const { node, sandboxes } = await withClient(async (c) => {
    const pods = await listAllPods(c);
    const checked = [];
    for (const p of pods) checked.push({ sandbox_id: p.sandbox_id, pod: podName(p), problems: (await c.Check({ sandbox_id: p.sandbox_id })).problems as string[] });
    return { node: await c.GetNode(), sandboxes: checked };
  });
  const bad = sandboxes.filter((x) => x.problems.length);
  const ok = node.ready && !bad.length;
  print(o.output, { ok, node: { ready: node.ready, reason: node.networks[0]?.reason ?? '', warnings: node.warnings }, sandboxes: bad }, () =>
    `node: ${node.ready ? 'ready' : `NOT READY: ${node.networks[0]?.reason}`}\n` +
    node.warnings.map((w: string) => `warning: ${w}\n`).join('') +
    `sandboxes: ${sandboxes.length} checked, ${bad.length} with problems\n` +
    bad.map((x) => x.problems.map((p) => `problem: ${shortId(x.sandbox_id)} (${x.pod}): ${p}\n`).join('')).join(''));
  if (!ok) process.exitCode = 2;
});

program
  .command('trace <sandbox> [destination]')
  .usage('<sandbox> <destination> | --from-node <destination>')
  .description(`the path a pod's packet to an address takes, hop by hop, as kni and the kernel see it now; nothing is sent (sandbox: ${SANDBOX_REF_HELP}; destination: an IP address, or service/NAMESPACE/NAME or pod/NAMESPACE/NAME, in Kubernetes)`)
  .option('--from-node', "from the node's own network namespace instead of a pod's (what the kubelet's probes and host-network pods send)")
  .option('--port <port>', "the port sent to, 80 or 53/udp (a Service's port for a ClusterIP): the Service is checked for it and the NetworkPolicies on the path judged on it")
  .addOption(output())
  .action(async (first: string, second: string | undefined, o) => {
    if (o.fromNode && second !== undefined) fail('trace --from-node takes a destination only, no sandbox');
    if (!o.fromNode && second === undefined) fail('trace needs a sandbox and a destination (or --from-node and a destination)');
    const port: string = o.port ?? '';
    const t = await withClient(async (c) => c.Trace(o.fromNode ? { from_node: true, destination: first, port } : { sandbox_id: await sandboxOf(c, first), destination: second, port }));
    const given: string = o.fromNode ? first : second!;
    const named = /^(service|svc|pod)\//.test(given.trim()) ? `${given.trim()} is ${t.destination}\n` : '';
    print(o.output, t, () => named + t.hops.map((h: { at: string; what: string; problem: string }) => `${h.at}: ${h.what}\n${h.problem ? `  PROBLEM: ${h.problem}\n` : ''}`).join('') + (t.ok ? 'ok\n' : ''));
    if (!t.ok) process.exitCode = 2;
  });

program
  .command('policy <sandbox>')
  .description(`the policies that judge a pod (ClusterNetworkPolicies of the Admin tier, NetworkPolicies, the Baseline tier's) and what each does, as kni's policy compiled them for the kernel (sandbox: ${SANDBOX_REF_HELP})`)
  .addOption(output())
  .action(async (ref: string, o) => {
    const p = await withClient(async (c) => c.GetPodPolicy({ sandbox_id: await sandboxOf(c, ref) }));
    print(o.output, p, () => {
      if (!p.enforced) return `not enforced by kni: ${p.reason}\n`;
      const lines = [`host end ${p.host_end}: chains in-${p.host_end} and out-${p.host_end} in table inet kni-policy`];
      for (const d of ['ingress', 'egress']) {
        const mine = p.policies.filter((x: any) => x.direction === d);
        if (!mine.length) lines.push(`${d}: not isolated (no policy selects the pod), everything passes`);
        for (const x of mine) {
          // A ClusterNetworkPolicy's name has no namespace; its rules say their action.
          if (!x.name.includes('/')) lines.push(`${d}: ClusterNetworkPolicy ${x.name}`, ...x.allows.map((a: string) => `  ${a}`));
          else lines.push(`${d}: ${x.name}`, ...(x.allows.length ? x.allows.map((a: string) => `  allows ${a}`) : ['  allows nothing']));
        }
      }
      lines.push(...p.problems.map((x: string) => `PROBLEM: ${x}${x.slice(0, x.indexOf(': ')).includes('/') ? ' (that rule allows nothing)' : ''}`));
      return `${lines.join('\n')}\n`;
    });
  });

program.command('reconcile').description('compare every record with the kernel now: repair, release, remove stale veths').addOption(output()).action(async (o) => {
  const r = await withClient((c) => c.Reconcile({}));
  print(o.output, r, () => (r.findings.length ? r.findings.map((f: string) => `${f}\n`).join('') : 'kernel and records agree\n'));
});

program.command('extensions').description('registered extensions: order, events, health, last error, calls, latency').addOption(output()).action(async (o) => {
  const r = await withClient((c) => c.ListExtensions({}));
  print(o.output, r.extensions, () =>
    table([['NAME', 'ORDER', 'EVENTS', 'POLICY', 'HEALTHY', 'CALLS', 'FAILURES', 'LAST MS', 'LAST ERROR', 'SOCKET'], ...r.extensions.map((x: any) => [x.name, String(x.order), x.events.join(','), x.failure_policy, String(x.healthy), String(x.calls), String(x.failures), Number(x.last_call_ms).toFixed(1), x.last_error || '-', x.socket])]),
  );
});

/** knictl events --since against a kni that does not mark the end of the past: this long without an event ends it. */
const OLD_KNI_QUIET_MS = 5000;

program
  .command('events')
  .description('pod network changes as they happen (attached, detached, repaired, released, extension_failed), each with a resume token')
  .option('-f, --follow', 'keep watching (default when no --since is given)')
  .option('--since <token>', 'the events after the one with this resume token, then end (with --follow: then keep watching)')
  .option('--sandbox <sandbox>', `only this sandbox's events (${SANDBOX_REF_HELP}; a sandbox already gone by its whole id)`)
  .addOption(output())
  .action(async (o: { follow?: boolean; since?: string; sandbox?: string; output: string }) => {
    const socket = usableSocket();
    const follow = o.follow || !o.since;
    // A sandbox already released is in the event log but no longer listed: its id is taken as given.
    const sandbox = o.sandbox ? await withClient((c) => sandboxOf(c, o.sandbox!, true)) : '';
    await new Promise<void>((resolve) => {
      // Without --follow: what is past, up to kni's mark that the rest would be new (however
      // long a busy node takes to send it; a pause is no sign of the end). A kni from before the
      // mark sends none: after OLD_KNI_QUIET_MS without an event, that is taken for the end.
      let quiet: NodeJS.Timeout | undefined;
      const end = () => {
        clearTimeout(quiet);
        w.close();
        resolve();
      };
      const again = () => {
        if (follow) return;
        clearTimeout(quiet);
        quiet = setTimeout(end, OLD_KNI_QUIET_MS);
      };
      const w = watchEvents(socket, { resume_token: o.since ?? '', sandbox_id: sandbox, mark_backlog_end: !follow }, (e) => {
        if (e.type === 'backlog_end') return end();
        again();
        const ips = e.interfaces.flatMap((i: any) => i.addresses.map((a: any) => a.address)).join(',');
        process.stdout.write(o.output === 'json' ? `${JSON.stringify(e)}\n` : printable(`${e.time}  ${e.type.padEnd(16)} ${shortId(e.sandbox_id)}  ${podName(e)}  ${ips || '-'}${e.message ? `  ${e.message}` : ''}  [${e.resume_token}]`) + '\n');
      }, (err) => {
        clearTimeout(quiet);
        if (err && err.code !== grpc.status.CANCELLED) fail(`${grpc.status[err.code]}: ${err.details}`);
        resolve();
      });
      again();
      process.once('SIGINT', end);
    });
  });

program.parseAsync().catch((e) => fail((e as Error).message));
