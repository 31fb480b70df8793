// A private containerd + runc for end-to-end tests: its own root, state, sockets and runc root
// under one directory, running in the test node netns, with kni as its CNI network. Two
// flavours: Debian's containerd 1.6 (CNI only), and containerd 2.x built by
// hack/cluster/build-components.sh (its binaries, shim and ctr from that cache; NRI on).
// stop() removes every sandbox, the shims, mounts, cgroups and files it made, whatever happened.
import * as grpc from '@grpc/grpc-js';
import { ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Client } from '../../plugin/client/clients';
import { loadProto, packageRoot } from '../../plugin/server/protos';
import { RUN, sh, trySh } from './sh';

export const IMAGE = 'localhost/kni-e2e:1';

export interface Flavour {
  name: string;
  /** Directory holding containerd, containerd-shim-runc-v2 and ctr ('' = the system's). */
  binDir: string;
  /** containerd 2.x: config version 3, NRI on. */
  v2: boolean;
}
export const CONTAINERD_16: Flavour = { name: 'containerd 1.6', binDir: '', v2: false };
export const CONTAINERD_2 = (binDir: string): Flavour => ({ name: 'containerd 2.x', binDir, v2: true });

/**
 * What runc left of the containers a containerd ran: their processes and cgroups
 * (`/k8s.io/<id>` in every hierarchy: CRI's namespace, with no cgroup parent given). containerd
 * 2.1 leaves the pause process running, its shim gone, when an NRI plugin fails RunPodSandbox
 * (critest's "should fail RunPodSandbox and clean up when the NRI hook errors";
 * containerd/containerd#13355, fixed in 2.2.6). Only the ids in this containerd's own log
 * ("connecting to shim <id>") are looked at.
 */
export async function endContainerLeftovers(containerdLog: string): Promise<void> {
  const ids = new Set([...containerdLog.matchAll(/connecting to shim ([0-9a-f]{64})\b/g)].map((m) => m[1]));
  if (!ids.size) return;
  const hierarchies = [...new Set(fs.readFileSync('/proc/mounts', 'utf8').split('\n').map((l) => l.split(' ')).filter((f) => f[2] === 'cgroup' || f[2] === 'cgroup2').map((f) => f[1]))];
  const procsOf = (id: string): number[] => {
    const pids = new Set<number>();
    for (const h of hierarchies) {
      try {
        for (const p of fs.readFileSync(path.join(h, 'k8s.io', id, 'cgroup.procs'), 'utf8').split('\n')) if (p) pids.add(Number(p));
      } catch {
        // no such cgroup in this hierarchy
      }
    }
    return [...pids];
  };
  for (const id of ids) {
    for (let tries = 0; tries < 50; tries++) {
      const pids = procsOf(id);
      if (!pids.length) break;
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone meanwhile
        }
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    for (const h of hierarchies) {
      try {
        fs.rmdirSync(path.join(h, 'k8s.io', id));
      } catch {
        // not there
      }
    }
  }
}

/** A CRI RuntimeService client on a runtime's socket (what crictl would call). */
export function criClient(sock: string): Client {
  const pkg = loadProto('cri/runtime_v1.proto') as any;
  const Ctor = pkg.runtime.v1.RuntimeService as grpc.ServiceClientConstructor;
  const raw = new Ctor(`unix://${sock}`, grpc.credentials.createInsecure());
  const out: Record<string, unknown> = { close: () => raw.close() };
  for (const m of Object.keys(Ctor.service)) {
    out[m] = (req: object = {}, timeoutMs = 60_000) =>
      new Promise((resolve, reject) => (raw as any)[m](req, { deadline: Date.now() + timeoutMs }, (e: Error | null, r: unknown) => (e ? reject(e) : resolve(r))));
  }
  return out as Client;
}

/**
 * runc's shim puts its sockets under /run/containerd/s whatever containerd's own state dir is:
 * the directories stay behind after the last shim, and so does the socket of a shim the
 * cleanup had to kill. Whether they were there before the first test (a containerd of the
 * machine's own) decides whether a test may remove them: if not, every shim there is a test's.
 */
const SHIM_SOCKET_ROOT = '/run/containerd';
const shimRootPreexisted = fs.existsSync(SHIM_SOCKET_ROOT);

/** Nobody listens on it any more (a killed shim's): connecting is refused at once. */
const deadSocket = (p: string): Promise<boolean> =>
  new Promise((resolve) => {
    const c = net.connect(p);
    c.once('connect', () => (c.destroy(), resolve(false)));
    c.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'ECONNREFUSED'));
  });

async function removeShimSocketDirs(): Promise<void> {
  if (shimRootPreexisted) return;
  const dir = path.join(SHIM_SOCKET_ROOT, 's');
  let names: string[] = [];
  try {
    names = fs.readdirSync(dir);
  } catch {
    // gone already
  }
  for (const n of names) if (await deadSocket(path.join(dir, n))) fs.rmSync(path.join(dir, n), { force: true });
  for (const d of [dir, SHIM_SOCKET_ROOT]) {
    try {
      fs.rmdirSync(d); // only when empty: another test's shims may still be there
    } catch {
      // not empty, or gone already
    }
  }
}

export class ContainerdEnv {
  readonly sock: string;
  readonly confDir: string;
  readonly binDir: string;
  readonly netnsRoot: string;
  /** containerd 2.x: the directory of registries' hosts.toml (a host's pulls sent elsewhere). */
  readonly registryHosts: string;
  proc?: ChildProcess;
  output = '';
  private clients: Client[] = [];

  constructor(readonly dir: string, public nodeNetns: string, readonly flavour: Flavour = CONTAINERD_16) {
    this.sock = `${dir}/containerd.sock`;
    this.confDir = `${dir}/net.d`;
    this.binDir = `${dir}/cni-bin`;
    this.netnsRoot = `${dir}/state/io.containerd.grpc.v1.cri/netns`;
    this.registryHosts = `${dir}/certs.d`;
  }

  /** The kni settings that point kni at this containerd. */
  static forRun(nodeNetns: string, flavour: Flavour = CONTAINERD_16): ContainerdEnv {
    return new ContainerdEnv(`/tmp/${RUN}-ctrd`, nodeNetns, flavour);
  }

  /** ctr of this flavour, with its arguments. */
  ctr(args: string[]): { ok: boolean; out: string } {
    return trySh(this.flavour.binDir ? `${this.flavour.binDir}/ctr` : 'ctr', ['-a', this.sock, ...args]);
  }

  kniConfig(): Record<string, unknown> {
    return {
      allowedNetnsRoots: [this.netnsRoot],
      cni: { confDir: this.confDir, binDir: this.binDir },
      cri: { socket: this.sock },
      ...(this.flavour.v2 ? { nri: { enabled: true, socket: `${this.dir}/nri.sock` } } : {}),
    };
  }

  writeConfig(): void {
    fs.mkdirSync(this.binDir, { recursive: true });
    fs.mkdirSync(this.confDir, { recursive: true });
    fs.copyFileSync('/usr/lib/cni/loopback', `${this.binDir}/loopback`); // containerd sets up lo with it
    fs.chmodSync(`${this.binDir}/loopback`, 0o755);
    const d = this.dir;
    fs.writeFileSync(`${d}/config.toml`, this.flavour.v2 ? this.configV3() : this.configV2());
  }

  private configV2(): string {
    const d = this.dir;
    return `version = 2
root = "${d}/root"
state = "${d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "${this.sock}"
[ttrpc]
  address = "${this.sock}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${IMAGE}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "${d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "${this.binDir}"
    conf_dir = "${this.confDir}"
    max_conf_num = 1
`;
  }

  /** containerd 2.x: the template the test cluster uses too (hack/lib/containerd-v3.toml). */
  private configV3(): string {
    const d = this.dir;
    const values: Record<string, string> = {
      ROOT: `${d}/root`, STATE: `${d}/state`, SOCKET: this.sock, IMAGE, CNI_BIN: this.binDir, CNI_CONF: this.confDir, RUNC_ROOT: `${d}/runc`, NRI_SOCKET: `${d}/nri.sock`, REGISTRY_HOSTS: this.registryHosts,
    };
    return fs.readFileSync(path.join(packageRoot(), 'hack/lib/containerd-v3.toml'), 'utf8').replace(/@([A-Z_]+)@/g, (_, k: string) => values[k]);
  }

  async start(): Promise<void> {
    fs.mkdirSync(this.dir, { recursive: true });
    if (!fs.existsSync(`${this.dir}/config.toml`)) this.writeConfig();
    const bin = this.flavour.binDir;
    // The shim is found on PATH: the flavour's own first.
    const env = bin ? { ...process.env, PATH: `${bin}:${process.env.PATH}` } : process.env;
    const proc = spawn('nsenter', [`--net=${this.nodeNetns}`, bin ? `${bin}/containerd` : 'containerd', '--config', `${this.dir}/config.toml`], { stdio: ['ignore', 'pipe', 'pipe'], env });
    this.proc = proc;
    proc.stdout!.on('data', (b) => (this.output += b));
    proc.stderr!.on('data', (b) => (this.output += b));
    const deadline = Date.now() + 30_000;
    while (!this.ctr(['version']).ok) {
      if (proc.exitCode !== null) throw new Error(`containerd exited with ${proc.exitCode}:\n${this.output.slice(-3000)}`);
      if (Date.now() > deadline) throw new Error(`containerd did not answer within 30 s:\n${this.output.slice(-3000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    if (!this.ctr(['-n', 'k8s.io', 'images', 'check', `name==${IMAGE}`]).out.includes(IMAGE)) {
      const tar = `${this.dir}/image.tar`;
      sh('bash', [path.join(packageRoot(), 'hack/e2e/build-image.sh'), tar, IMAGE]);
      const imported = this.ctr(['-n', 'k8s.io', 'images', 'import', tar]);
      if (!imported.ok) throw new Error(`image import failed: ${imported.out}`);
    }
  }

  cri(): Client {
    const c = criClient(this.sock);
    this.clients.push(c);
    return c;
  }

  /** Stops containerd (SIGTERM, or SIGKILL), leaving its shims and pods running. */
  async stopDaemon(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill(signal);
    await exited;
  }

  /** Removes every sandbox through CRI (while kni still answers), then everything else. */
  async stop(): Promise<void> {
    try {
      if (this.proc && this.proc.exitCode === null) {
        const cri = this.cri();
        const { items } = await cri.ListPodSandbox({}, 10_000).catch(() => ({ items: [] }));
        for (const s of items) {
          await cri.StopPodSandbox({ pod_sandbox_id: s.id }, 20_000).catch(() => undefined);
          await cri.RemovePodSandbox({ pod_sandbox_id: s.id }, 20_000).catch(() => undefined);
        }
      }
    } finally {
      for (const c of this.clients) c.close();
      await this.stopDaemon();
      // Shims outlive containerd: end them, then their mounts.
      trySh('pkill', ['-KILL', '-f', `containerd-shim-runc-v2.*${this.sock}`]);
      await new Promise((r) => setTimeout(r, 200));
      const mounts = fs.readFileSync('/proc/mounts', 'utf8').split('\n').map((l) => l.split(' ')[1]).filter((m) => m && m.startsWith(this.dir));
      for (const m of mounts.reverse()) trySh('umount', ['-l', m]);
      fs.rmSync(this.dir, { recursive: true, force: true });
      await endContainerLeftovers(this.output);
      await removeShimSocketDirs();
    }
  }
}
