// A kni-runtime for tests: its own node netns (standing in for the node, so the host's
// networking is never touched), its own state dir, netns dir and socket, all named with the
// run prefix and all removed by cleanup(), whatever happened.
import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Client, kniClient, runtimeClient } from '../../plugin/client/clients';
import { packageRoot } from '../../plugin/server/protos';
import { linkNamesSettled, RUN, sh, trySh } from './sh';
import { waitFor } from './wait';

let counter = 0;

export interface LaunchOptions {
  /** Extra kni-runtime flags. */
  args?: string[];
  /** Extra environment. */
  env?: Record<string, string>;
  /** A script to run instead of dist/plugin/main.js (it must end up running main). */
  script?: string;
  /** Runs once the node netns exists, before the daemon starts (its name is passed). */
  beforeLaunch?: (nodeNetnsName: string) => void;
}

export class TestDaemon {
  readonly nodeNetns: string;
  readonly nodeNetnsName: string;
  readonly dir: string;
  readonly netnsDir: string;
  readonly socket: string;
  readonly stateDir: string;
  readonly configFile: string;
  readonly cniSocket: string;
  proc?: ChildProcess;
  output = '';
  private clients: Client[] = [];

  private constructor(config: Record<string, unknown>, readonly launchOptions: LaunchOptions) {
    const n = ++counter;
    this.nodeNetnsName = `${RUN}-node${n}`;
    this.nodeNetns = `/run/netns/${this.nodeNetnsName}`;
    this.dir = `/tmp/${RUN}-${n}`;
    this.netnsDir = `/run/${RUN}-netns${n}`;
    this.socket = `${this.dir}/kni.sock`;
    this.stateDir = `${this.dir}/state`;
    this.configFile = `${this.dir}/config.json`;
    fs.mkdirSync(this.dir, { recursive: true });
    this.cniSocket = `${this.dir}/cni.sock`;
    const cni = { socket: this.cniSocket, ...((config.cni as object) ?? {}) };
    fs.writeFileSync(this.configFile, JSON.stringify({ netnsDir: this.netnsDir, ...config, cni }));
    sh('ip', ['netns', 'add', this.nodeNetnsName]);
    sh('ip', ['-n', this.nodeNetnsName, 'link', 'set', 'lo', 'up']);
  }

  static async start(config: Record<string, unknown> = {}, launchOptions: LaunchOptions = {}): Promise<TestDaemon> {
    const d = new TestDaemon(config, launchOptions);
    try {
      launchOptions.beforeLaunch?.(d.nodeNetnsName);
      await d.launch();
    } catch (e) {
      d.cleanup();
      throw e;
    }
    return d;
  }

  async launch(): Promise<void> {
    const main = this.launchOptions.script ?? path.join(packageRoot(), 'dist/plugin/main.js');
    const args = [`--net=${this.nodeNetns}`, process.execPath, main, '--socket', this.socket, '--state-dir', this.stateDir, '--config', this.configFile, ...(this.launchOptions.args ?? [])];
    const proc = spawn('nsenter', args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...this.launchOptions.env },
    });
    this.proc = proc;
    proc.stdout!.on('data', (b) => (this.output += b));
    proc.stderr!.on('data', (b) => (this.output += b));
    const deadline = Date.now() + 15_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`kni-runtime exited with ${proc.exitCode}:\n${this.output}`);
      if (fs.existsSync(this.socket)) {
        try {
          const c = this.rt();
          await c.GetNode({}, 2000);
          return;
        } catch {
          // not serving yet
        }
      }
      if (Date.now() > deadline) throw new Error(`kni-runtime did not start serving within 15 s:\n${this.output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  rt(): Client {
    const c = runtimeClient(this.socket);
    this.clients.push(c);
    return c;
  }

  kni(): Client {
    const c = kniClient(this.socket);
    this.clients.push(c);
    return c;
  }

  /** Stops the daemon with a signal and waits for it to exit. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return p?.exitCode ?? null;
    const exited = new Promise<number | null>((resolve) => p.once('exit', (code) => resolve(code)));
    p.kill(signal);
    return exited;
  }

  async restart(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    await this.stop(signal);
    this.closeClients();
    await this.launch();
  }

  /**
   * Host-side links in the node netns (the bridge and the pods' host ends), once the veths of
   * detached pods are gone: a detach answers before the kernel's slow veth delete, which kni's
   * reaper runs moments later (plugin/pod/veth-reaper.ts).
   */
  nodeLinks(): string[] {
    return linkNamesSettled(() => sh('ip', ['-n', this.nodeNetnsName, '-o', 'link', 'show']), (out) => out.includes('alias kni-released:'));
  }

  /**
   * The kni host veths once they number n: the veth of a netns kni unpinned goes when the
   * kernel finishes tearing that netns down, moments after the detach answered.
   */
  async kniVethsSettled(n: number): Promise<string[]> {
    // Generous: the kernel reaps netns in batches, later on a busy machine. The caller asserts.
    await waitFor(() => this.kniVeths().length === n, 20_000, () => '').catch(() => undefined);
    return this.kniVeths();
  }

  /** The pods' host veths on the node (kni + 12 hex digits). */
  kniVeths(): string[] {
    return this.nodeLinks().filter((l) => /^kni[0-9a-f]{12}$/.test(l));
  }

  /** True once the node has no link of that name (waiting up to 20 s, as for kniVethsSettled). */
  async linkGone(name: string): Promise<boolean> {
    await waitFor(() => !this.nodeLinks().includes(name), 20_000, () => '').catch(() => undefined);
    return !this.nodeLinks().includes(name);
  }

  /** A netns for a pod that kni did not create (the runtime-created case), removed by cleanup. */
  makePodNetns(name: string): string {
    const full = `${RUN}-${name}`;
    sh('ip', ['netns', 'add', full]);
    this.extraNetns.push(full);
    return `/run/netns/${full}`;
  }

  private extraNetns: string[] = [];

  closeClients(): void {
    for (const c of this.clients) c.close();
    this.clients = [];
  }

  cleanup(): void {
    this.closeClients();
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
    for (const n of this.extraNetns) trySh('ip', ['netns', 'del', n]);
    if (fs.existsSync(this.netnsDir)) {
      for (const f of fs.readdirSync(this.netnsDir)) {
        trySh('umount', ['-l', path.join(this.netnsDir, f)]);
      }
      trySh('umount', ['-l', this.netnsDir]);
      fs.rmSync(this.netnsDir, { recursive: true, force: true });
    }
    trySh('ip', ['netns', 'del', this.nodeNetnsName]);
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
