// What Kata's runtime does in a pod netns before its VM starts (its "tcfilter" model), for tests
// that play it: a tap joined to eth0 by ingress redirects both ways, and the guest's network
// taken from a scan of the netns. `run` runs a command inside that netns.
import type { GuestNetwork } from './qemu-guest';

export type NetnsRunner = (cmd: string, args: string[]) => { ok: boolean; out: string };

/** Kata's tap name for the pod's first interface. */
export const KATA_TAP = 'tap0_kata';

/** Makes Kata's tap (at mtu) and the redirects eth0 ⇄ tap; throws with the failing command's output. */
export function kataTap(run: NetnsRunner, mtu: number): void {
  const redirect = (from: string, to: string) => ['tc', 'filter', 'add', 'dev', from, 'parent', 'ffff:', 'protocol', 'all', 'u32', 'match', 'u8', '0', '0', 'action', 'mirred', 'egress', 'redirect', 'dev', to];
  for (const args of [
    ['ip', 'tuntap', 'add', 'dev', KATA_TAP, 'mode', 'tap'],
    ['ip', 'link', 'set', KATA_TAP, 'mtu', String(mtu), 'up'],
    ['tc', 'qdisc', 'add', 'dev', 'eth0', 'ingress'],
    ['tc', 'qdisc', 'add', 'dev', KATA_TAP, 'ingress'],
    redirect('eth0', KATA_TAP),
    redirect(KATA_TAP, 'eth0'),
  ]) {
    const r = run(args[0], args.slice(1));
    if (!r.ok) throw new Error(`${args.join(' ')}: ${r.out}`);
  }
}

/** The guest's network as Kata takes it from eth0: its MAC, MTU, global addresses, routes and permanent neighbours. */
export function scanNetns(run: NetnsRunner): GuestNetwork {
  const json = (args: string[]) => JSON.parse(run('ip', ['-j', ...args]).out || '[]');
  const [link] = json(['link', 'show', 'dev', 'eth0']);
  const addresses = json(['addr', 'show', 'dev', 'eth0'])[0].addr_info.filter((a: any) => a.scope === 'global').map((a: any) => `${a.local}/${a.prefixlen}`);
  const routes = [...json(['-4', 'route', 'show', 'dev', 'eth0']), ...json(['-6', 'route', 'show', 'dev', 'eth0'])].filter((r: any) => !String(r.dst).startsWith('fe80'));
  const neighbours = [...json(['-4', 'neigh', 'show', 'dev', 'eth0', 'nud', 'permanent']), ...json(['-6', 'neigh', 'show', 'dev', 'eth0', 'nud', 'permanent'])];
  return {
    mac: link.address,
    mtu: link.mtu,
    addresses,
    // Link routes first: a route through a gateway needs the way to it.
    routes: [...routes.filter((r: any) => !r.gateway), ...routes.filter((r: any) => r.gateway)].map((r: any) => ({ destination: r.dst, gateway: r.gateway })),
    neighbours: neighbours.map((n: any) => ({ address: n.dst, mac: n.lladdr })),
  };
}
