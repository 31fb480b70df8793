// The NetworkPolicies on a traced path as hops: the sender's egress policies toward the receiver,
// the receiver's ingress policies from the sender, each with whether it lets the packet through
// (judged by plugin/policy/policy-model.ts). Who drops what they deny is said: kni's policy, or
// with it off, the policy agent that may run beside kni.
import { Direction, DirectionVerdict, portText, TracedPort } from '../kube/policy-verdict';
import type { PolicyContext, Receiver, TraceHop } from './trace-hop';
import type { PodName } from './trace-destination';

const podText = (p: PodName): string => `pod ${p.namespace}/${p.name}`;

/** The sender's egress hop (at the pod) and the receiver's ingress hop (at `at`), each only where a policy isolates it. */
export async function policyHops(ctx: PolicyContext | undefined, receiver: Receiver, at: string): Promise<{ egress: TraceHop[]; ingress: TraceHop[] }> {
  const out = { egress: [] as TraceHop[], ingress: [] as TraceHop[] };
  if (!ctx) return out;
  const { sender } = ctx;
  const port = receiver.port ?? ctx.port;
  const always = receiver.ownNode ? 'between a pod and its own node' : sender.pod && receiver.pod && podText(sender.pod) === podText(receiver.pod) ? 'from a pod to itself' : '';
  if (sender.pod) {
    const v = await ctx.lookup.verdict('egress', sender.pod, { pod: receiver.pod, ip: receiver.ip }, port);
    const to = receiver.pod ? podText(receiver.pod) : receiver.ip;
    if (v?.decidedBy) out.egress.push(clusterHop('pod', 'egress', v.decidedBy, to, port, always));
    else if (v?.selecting.length) out.egress.push(verdictHop('pod', 'egress', sender.pod, v, to, port, always, ctx.lookup.enforcedByKni));
  }
  if (receiver.pod) {
    const v = await ctx.lookup.verdict('ingress', receiver.pod, { pod: sender.pod, ip: sender.ip }, port);
    const from = sender.pod ? podText(sender.pod) : sender.node ? `node ${sender.ip ?? ''}`.trim() : sender.ip ?? 'the sender';
    if (v?.decidedBy) out.ingress.push(clusterHop(at, 'ingress', v.decidedBy, from, port, always));
    else if (v?.selecting.length) out.ingress.push(verdictHop(at, 'ingress', receiver.pod, v, from, port, always, ctx.lookup.enforcedByKni));
  }
  return out;
}

function clusterHop(at: string, direction: Direction, d: NonNullable<DirectionVerdict['decidedBy']>, peer: string, port: TracedPort | undefined, always: string): TraceHop {
  const what = `ClusterNetworkPolicy ${d.policy} (${d.tier} tier, rule ${JSON.stringify(d.rule)}) ${d.action === 'Accept' ? 'accepts' : 'denies'} what is sent ${direction === 'ingress' ? 'from' : 'to'} ${peer}${port ? ` on ${portText(port)}` : ''}`;
  if (always) return { at, what: `${what}; what passes ${always} is never a policy's to stop`, problem: '' };
  return { at, what, problem: d.action === 'Deny' ? "kni's policy drops it" : '' };
}

/** `always`: what always passes, as the API says ("between a pod and its own node", "from a pod to itself"); '' for the rest. */
function verdictHop(at: string, direction: Direction, pod: PodName, v: DirectionVerdict, peer: string, port: TracedPort | undefined, always: string, byKni: boolean): TraceHop {
  const one = v.selecting.length === 1;
  const selects = `NetworkPolic${one ? 'y' : 'ies'} ${v.selecting.join(', ')} select${one ? 's' : ''} ${podText(pod)} for ${direction}`;
  const on = port ? ` on ${portText(port)}` : '';
  if (always) return { at, what: `${selects}; what passes ${always} is never a policy's to stop`, problem: '' };
  if (!v.allowedBy.length) {
    const none = one ? 'it allows nothing' : 'none of them allows what is';
    const dropped = byKni ? "kni's policy drops it" : `a policy agent enforcing ${one ? 'it' : 'them'} drops it (kni's policy is off)`;
    return { at, what: selects, problem: `${none} sent ${direction === 'ingress' ? 'from' : 'to'} ${peer}${on}: ${dropped}` };
  }
  const by = `${v.allowedBy.join(', ')} allow${v.allowedBy.length === 1 ? 's' : ''} it ${direction === 'ingress' ? 'from' : 'to'} ${peer}`;
  const where = port ? on : v.ports === 'all' ? ' on every port' : ` on ${v.ports.join(', ')} only (knictl trace --port checks one)`;
  return { at, what: `${selects}; ${by}${where}`, problem: '' };
}
