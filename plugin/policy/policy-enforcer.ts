// Network policy on this node: the model of the cluster's NetworkPolicies, the pods they judge,
// and the kernel's table kept equal to them (policy-ruleset.ts).
// - A pod of this node is admitted inside its attach, before its veth exists: its chains and
//   elements are in the kernel before it can send or receive a packet.
// - Every other change (a policy, a namespace's labels, a pod elsewhere) writes the whole table
//   again in one transaction, WRITE_DELAY_MS after it, and no sooner than twice the last
//   write's time after that write ended: changes that come together are written together, a
//   lone change soon, and a burst (1,000 policies created) costs the node at most a third of a
//   core for its writes.
// - Until the cluster's policies have been read the table in the kernel is left as it is (a
//   restart opens no window). An attach waits up to ADMIT_WAIT_MS for them; then (the API
//   server away since kni started) its pod starts isolated both ways, and gets its real
//   policies with the first whole write: the sandbox starts, and nothing a policy might forbid
//   passes meanwhile.
// Writes run one after another, each made from the state at its turn.
import { log } from '../core/log';
import { nftRun } from '../sys/libnftables';
import { LocalPod, PolicyModel, PolicyPod } from './policy-model';
import { podAddScript, podDeleteScript, podIsolatedScript, policyTableInKernel, policyTableScript } from './policy-ruleset';

const WRITE_DELAY_MS = 20;
const ADMIT_WAIT_MS = 3_000;

export class PolicyEnforcer {
  private model?: PolicyModel;
  /** This node's pods by host end. */
  private readonly local = new Map<string, LocalPod>();
  /** The cluster's pods by "namespace/name" (this node's too: their elements are the same). */
  private readonly others = new Map<string, PolicyPod>();
  private queue: Promise<void> = Promise.resolve();
  private writeTimer?: NodeJS.Timeout;
  private readyWaiters: (() => void)[] = [];
  /** How long the last whole write took (its script made and the kernel's answer), and when it ended. */
  private lastWriteMs = 0;
  private lastWriteEnd = 0;
  /** `problem`: said when a whole write fails (the node's warnings), cleared when one succeeds. */
  constructor(private readonly problem: (text: string | undefined) => void = () => undefined) {}

  /** The model the table was last made from (undefined until the cluster's policies are read). */
  get currentModel(): PolicyModel | undefined {
    return this.model;
  }

  get isReady(): boolean {
    return !!this.model;
  }

  /** The model after a change of policies or namespaces (the first one makes it ready). */
  setModel(model: PolicyModel): void {
    const first = !this.model;
    this.model = model;
    if (first) {
      for (const w of this.readyWaiters.splice(0)) w();
      this.writeNow();
    } else this.changed();
  }

  /** This node's pods as the runtime's records have them (at start, after a restart); those admitted since stay. */
  setLocal(pods: LocalPod[]): void {
    for (const p of pods) if (!this.local.has(p.end)) this.local.set(p.end, p);
    this.changed();
  }

  /** A pod of the cluster came or changed (undefined: it went, or has no address to judge). */
  setPod(key: string, pod: PolicyPod | undefined): void {
    if (pod) this.others.set(key, pod);
    else if (!this.others.delete(key)) return;
    this.changed();
  }

  /** This node's pods whose labels or ports changed: their chains follow at the next write. */
  updateLocal(end: string, change: Pick<PolicyPod, 'labels' | 'ports'>): void {
    const p = this.local.get(end);
    if (!p) return;
    this.local.set(end, { ...p, ...change });
    this.changed();
  }

  localPods(): LocalPod[] {
    return [...this.local.values()];
  }

  /** A new pod of this node into the kernel's table: resolves once it is there. */
  async admit(pod: LocalPod): Promise<void> {
    await this.ready(ADMIT_WAIT_MS).catch(() => undefined);
    this.local.set(pod.end, pod);
    await this.run(() => (this.model ? podAddScript(this.model, pod) : podIsolatedScript(pod, !policyTableInKernel())), `the network policy of pod ${pod.namespace}/${pod.name}`);
  }

  /** A pod of this node out of the table (its detach). A failure writes the whole table instead. */
  async release(end: string): Promise<void> {
    const pod = this.local.get(end);
    this.local.delete(end);
    if (!pod || !this.model) return;
    await this.run(() => podDeleteScript(this.model!, pod), `the network policy of pod ${pod.namespace}/${pod.name}`).catch((e) => {
      log('debug', "a pod's policy elements were not all there at its detach; the table is written whole", { pod: `${pod.namespace}/${pod.name}`, error: (e as Error).message });
      this.writeNow();
    });
  }

  /** The whole table now (reconcile: someone changed it). */
  writeNow(): void {
    if (this.writeTimer) clearTimeout(this.writeTimer);
    this.writeTimer = undefined;
    if (!this.model) return;
    let started = 0;
    this.run(() => {
      started = performance.now();
      return policyTableScript(this.model!, this.localPods(), [...this.others.values()]);
    }, 'the network policy table')
      .then(() => this.problem(undefined))
      .finally(() => {
        if (!started) return;
        this.lastWriteEnd = performance.now();
        this.lastWriteMs = this.lastWriteEnd - started;
      })
      .catch((e) => {
        const error = (e as Error).message;
        log('error', 'cannot write the network policy table', { error });
        this.problem(`the network policy table cannot be written, so policy changes are not enforced: ${error}`);
      });
  }

  stop(): void {
    if (this.writeTimer) clearTimeout(this.writeTimer);
    this.writeTimer = undefined;
    for (const w of this.readyWaiters.splice(0)) w();
  }

  private changed(): void {
    if (!this.model || this.writeTimer) return;
    this.writeTimer = setTimeout(() => this.writeNow(), Math.max(WRITE_DELAY_MS, this.lastWriteEnd + 2 * this.lastWriteMs - performance.now()));
    this.writeTimer.unref();
  }

  private ready(waitMs: number): Promise<void> {
    if (this.model) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.readyWaiters = this.readyWaiters.filter((w) => w !== done);
        reject(new Error(`the cluster's NetworkPolicies have not been read in ${waitMs / 1000} s`));
      }, waitMs);
      const done = () => {
        clearTimeout(timer);
        if (this.model) resolve();
        else reject(new Error('network policy stopped'));
      };
      this.readyWaiters.push(done);
    });
  }

  /** One write after those before it, its script made at its turn. */
  private run(script: () => string, what: string): Promise<void> {
    const next = this.queue.then(async () => {
      const text = script();
      if (text) await nftRun(text, what);
    });
    this.queue = next.catch(() => undefined);
    return next;
  }
}
