// Attaching a new sandbox, whatever the entry point: the request validated, its netns opened
// once, then under the sandbox's lock either the attach it already has (an idempotent retry) or
// a new record planned, wired and committed (attach-pipeline.ts). The span, log line and
// histogram around it are NetworkRuntime.attach's.
import path from 'node:path';
import { attachPlanned, PipelineParts } from './attach-pipeline';
import { assignDevices, DeviceParts } from './device-assignment';
import { KniError } from './errors';
import { emitAttached, EventLog } from './events';
import { isoTime } from './log';
import type { AttachmentRequest } from './network-backend';
import { PlanParts, planSandbox } from './network-plan';
import type { SandboxKind } from './config';
import type { KeyedMutex } from './keyed-mutex';
import type { NodeLifecycle } from './node-lifecycle';
import type { ExtensionRegistry } from '../extensions/extension-registry';
import { NetnsRecord, PodRef, SandboxRecord } from '../store/records';
import type { AttachRequest } from './runtime-types';
import * as validate from './validate';
import { NetnsHandle, openNetns } from '../netns/open-netns';
import { withSpan } from '../observe/tracing';

/** What attaching a sandbox uses of the runtime. */
export interface AttachParts extends PipelineParts, PlanParts, DeviceParts {
  readonly locks: KeyedMutex;
  readonly events: EventLog;
  readonly netns: ReadonlyMap<string, NetnsRecord>;
  readonly extensions: Pick<ExtensionRegistry, 'gateReason'>;
  readonly node: Pick<NodeLifecycle, 'syncHostPorts' | 'ensure'>;
  podRef(pod?: Partial<PodRef>): PodRef;
  sandboxKind(runtimeHandler: string, annotations: Record<string, string>): SandboxKind;
  release(rec: SandboxRecord, releaseNetns: boolean, netnsEnding?: boolean): Promise<void>;
}

type SandboxMeta = Pick<SandboxRecord, 'pod' | 'labels' | 'annotations' | 'runtimeHandler' | 'kind' | 'entryPoint' | 'cgroupParent'>;

export async function attachSandbox(rt: AttachParts, req: AttachRequest): Promise<SandboxRecord> {
  const id = validate.sandboxId(req.sandboxId);
  const ifName = validate.interfaceName(req.interfaceName || 'eth0');
  const netnsPath = validate.netnsPath(req.netnsPath);
  const pod = rt.podRef(req.pod);
  const labels = validate.stringMap(req.labels, 'labels');
  const annotations = validate.stringMap(req.annotations, 'annotations');
  const runtimeHandler = typeof req.runtimeHandler === 'string' ? req.runtimeHandler.slice(0, 253) : '';
  const kind = rt.sandboxKind(runtimeHandler, annotations);
  const cgroupParent = validate.cgroupParent(req.cgroupParent);
  const requested: AttachmentRequest = { ips: validate.requestedIps(req.requestedIps), mac: validate.requestedMac(req.requestedMac), ports: validate.portMappings(req.portMappings), bandwidth: validate.bandwidth(req.bandwidth, annotations) };
  // Opened once and checked as opened; this fd is the only way the attach reaches the netns.
  const ns = withSpan('netns.open', { 'kni.netns.path': netnsPath }, () => openNetns(netnsPath, { allowedRoots: rt.cfg.allowedNetnsRoots }));
  try {
    return await rt.locks.run(id, () => attachLocked(rt, id, ifName, ns, { pod, labels, annotations, runtimeHandler, kind, entryPoint: req.entryPoint ?? 'kni', ...(cgroupParent ? { cgroupParent } : {}) }, requested));
  } finally {
    ns.close();
  }
}

async function attachLocked(rt: AttachParts, id: string, ifName: string, ns: NetnsHandle, meta: SandboxMeta, requested: AttachmentRequest): Promise<SandboxRecord> {
  let existing = rt.sandboxes.get(id);
  if (existing && existing.phase !== 'attached') {
    // An earlier release (or rolled-back attach) that could not finish: finish it first.
    await rt.release(existing, false);
    existing = undefined;
  }
  if (existing) return alreadyAttached(existing, id, ifName, ns);
  await rt.node.ensure();
  const gate = rt.extensions.gateReason();
  if (gate) throw new KniError('UNAVAILABLE', `no pods on this node yet: ${gate}`);
  // A netns kni made is pinned at <netnsDir>/<its name>: found by name, not by a walk of them all.
  const mine = rt.netns.get(path.basename(ns.path));
  const owned = mine?.path === ns.path ? mine : undefined;
  const rec: SandboxRecord = {
    id, phase: 'attaching', ...meta, netnsPath: ns.path, netnsInode: ns.inode, ownedNetns: owned?.name ?? '', interfaces: [],
    ...(requested.ports.length ? { portMappings: requested.ports } : {}),
    ...(requested.bandwidth ? { bandwidth: requested.bandwidth } : {}),
    createdAt: isoTime(),
  };
  const plan = planSandbox(rt, rec, ifName, requested);
  if (plan.some((p) => p.resourceName || p.req.device)) await assignDevices(rt, rec, plan); // no await hop for the others
  const done = await attachPlanned(rt, rec, plan, ns);
  if (owned) owned.sandboxId = id;
  emitAttached(rt.events, done);
  return done;
}

/** A retried attach of the same sandbox in the same netns gets the attach it has; any other is refused. */
function alreadyAttached(existing: SandboxRecord, id: string, ifName: string, ns: NetnsHandle): SandboxRecord {
  if (existing.netnsPath !== ns.path) {
    throw new KniError('ALREADY_EXISTS', `sandbox ${id} is already attached in netns ${existing.netnsPath}, not ${ns.path}`);
  }
  if (existing.netnsInode !== undefined && existing.netnsInode !== ns.inode) {
    throw new KniError('ALREADY_EXISTS', `sandbox ${id} is attached in another network namespace than the one now at ${ns.path}`);
  }
  if (!existing.interfaces.some((i) => i.name === ifName)) {
    throw new KniError('ALREADY_EXISTS', `sandbox ${id} is already attached with interface ${existing.interfaces[0]?.name}`);
  }
  return existing;
}
