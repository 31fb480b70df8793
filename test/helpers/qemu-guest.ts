// A real VM guest for tests: QEMU booting Debian's kernel and hack/vm/build-guest.sh's
// initramfs, its one NIC (virtio-net) on a tap in a pod netns, driven through the shell on its
// serial console. Software emulation (TCG) unless a real KVM is there: this machine's /dev/kvm
// belongs to kvm_pvm, which cannot run a stock kernel.
import { ChildProcess, execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { packageRoot } from '../../plugin/server/protos';
import { waitFor } from './wait';

/** How a guest's NIC is configured, as a VMM's agent would from a scan of the netns or from GetPod. */
export interface GuestNetwork {
  mac: string;
  mtu: number;
  /** address/prefix */
  addresses: string[];
  /** In the order given: a link route before a route through its gateway. */
  routes: { destination: string; gateway?: string }[];
  neighbours: { address: string; mac: string }[];
}

/** The directory holding vmlinuz and initramfs.gz, built (and QEMU installed) when missing. */
export function guestImage(): string {
  const out = execFileSync('bash', [path.join(packageRoot(), 'hack/vm/build-guest.sh')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  return out.trim().split('\n').pop()!;
}

const realKvm = (): boolean => fs.existsSync('/dev/kvm') && (fs.existsSync('/sys/module/kvm_intel') || fs.existsSync('/sys/module/kvm_amd'));

export class QemuGuest {
  private console = '';
  private seq = 0;

  private constructor(readonly name: string, private readonly proc: ChildProcess) {
    proc.stdout!.on('data', (b) => (this.console += String(b).replace(/\r/g, '')));
    proc.stderr!.on('data', (b) => (this.console += String(b)));
  }

  /**
   * Boots a guest whose NIC opens the tap `tap`, with MAC `mac`; resolves once its shell answers.
   * `enter` runs a command in the tap's netns (["nsenter", "--net=<path>"], or with a node's
   * mount namespace first).
   */
  static async boot(image: string, name: string, enter: string[], tap: string, mac: string): Promise<QemuGuest> {
    const qemu = [
      'qemu-system-x86_64', '-name', name, '-accel', realKvm() ? 'kvm' : 'tcg', '-M', 'q35', '-m', '256', '-smp', '1',
      '-nodefaults', '-no-user-config', '-display', 'none', '-serial', 'stdio', '-monitor', 'none', '-no-reboot',
      '-kernel', `${image}/vmlinuz`, '-initrd', `${image}/initramfs.gz`, '-append', 'console=ttyS0 quiet panic=-1',
      '-netdev', `tap,id=n0,ifname=${tap},script=no,downscript=no`, '-device', `virtio-net-pci,netdev=n0,mac=${mac}`,
    ];
    // nsenter execs in place: the process is QEMU's, and killing it kills the guest.
    const proc = spawn(enter[0], [...enter.slice(1), ...qemu], { stdio: ['pipe', 'pipe', 'pipe'] });
    const g = new QemuGuest(name, proc);
    try {
      // Under software emulation on a busy machine a boot takes minutes, not seconds.
      await waitFor(() => g.console.includes('kni-guest-ready') || proc.exitCode !== null, 300_000, () => `guest ${name} did not boot:\n${g.console}`, 200);
      if (proc.exitCode !== null) throw new Error(`qemu exited with ${proc.exitCode}:\n${g.console}`);
      await g.must('true');
    } catch (e) {
      g.kill();
      throw e;
    }
    return g;
  }

  /** Runs a shell command in the guest: its exit code and output. */
  async run(cmd: string, timeoutMs = 120_000): Promise<{ code: number; out: string }> {
    const id = `${process.pid}-${++this.seq}`;
    const from = this.console.length;
    // The marker is written split in the command, so only its output matches.
    this.proc.stdin!.write(`${cmd}\necho "@@""${id}" $?\n`);
    const marker = new RegExp(`@@${id} (\\d+)\\n`);
    await waitFor(() => marker.test(this.console.slice(from)) || this.proc.exitCode !== null, timeoutMs, () => `guest ${this.name}: no answer to ${JSON.stringify(cmd)}:\n${this.console.slice(from)}`, 50);
    const tail = this.console.slice(from);
    const m = marker.exec(tail);
    if (!m) throw new Error(`guest ${this.name} stopped while running ${JSON.stringify(cmd)}:\n${tail}`);
    return { code: Number(m[1]), out: tail.slice(0, m.index) };
  }

  /** Runs a shell command in the guest; fails with its output unless it exits 0. */
  async must(cmd: string, timeoutMs?: number): Promise<string> {
    const r = await this.run(cmd, timeoutMs);
    if (r.code !== 0) throw new Error(`guest ${this.name}: ${cmd} exited with ${r.code}:\n${r.out}`);
    return r.out;
  }

  /** Configures the NIC statically, as a guest agent does. */
  async configure(n: GuestNetwork): Promise<void> {
    await this.must(`ip link set eth0 address ${n.mac} mtu ${n.mtu} up`);
    for (const a of n.addresses) await this.must(`ip addr add ${a} dev eth0${a.includes(':') ? ' nodad' : ''}`);
    for (const nb of n.neighbours) await this.must(`ip neigh replace ${nb.address} lladdr ${nb.mac} dev eth0 nud permanent`);
    for (const r of n.routes) await this.must(`ip route replace ${r.destination} ${r.gateway ? `via ${r.gateway} ` : ''}dev eth0`);
  }

  /** Pings from the guest until an answer comes (six tries of 5 s: a slow guest on a busy machine); true when one did. */
  async ping(address: string): Promise<boolean> {
    return (await this.run(`i=0; until ping -c 1 -W 5 ${address} >/dev/null; do i=$((i+1)); [ $i -ge 6 ] && break; done; [ $i -lt 6 ]`)).code === 0;
  }

  /** The guest's console so far (for failure messages). */
  get output(): string {
    return this.console;
  }

  kill(): void {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
  }

  /** Powers the guest off and waits for QEMU to exit. */
  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise((r) => this.proc.once('exit', r));
    this.kill();
    await exited;
  }
}
