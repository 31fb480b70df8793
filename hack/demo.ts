// The demo's client side: the kubelet-fork KNI flow for two pods, a ping between them, knictl
// (pods, a pod, a trace between them, the node, IPAM).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { kniClient, runtimeClient } from '../plugin/client/clients';

const socket = process.argv[2];
const knictl = (...args: string[]) =>
  process.stdout.write(execFileSync(process.execPath, [path.join(__dirname, '../plugin/knictl.js'), '--socket', socket, ...args], { encoding: 'utf8' }));

async function main(): Promise<void> {
  for (let i = 0; !fs.existsSync(socket); i++) {
    if (i > 200) throw new Error('kni-runtime did not start (see the daemon log below)');
    await new Promise((r) => setTimeout(r, 50));
  }
  const kni = kniClient(socket);
  const rt = runtimeClient(socket);
  await rt.GetNode({}, 10_000);
  const pods = [
    { id: 'demo-sandbox-frontend', name: 'frontend', namespace: 'demo' },
    { id: 'demo-sandbox-backend', name: 'backend', namespace: 'demo' },
  ];
  const netns: string[] = [];
  try {
    for (const p of pods) {
      const { netns_path } = await kni.CreateNetwork({ name: p.name, namespace: p.namespace });
      netns.push(netns_path);
      const t = process.hrtime.bigint();
      const res = await kni.AttachInterface({ id: p.id, name: p.name, namespace: p.namespace, extradata: { netns: netns_path } });
      const ms = Number(process.hrtime.bigint() - t) / 1e6;
      console.log(`== AttachInterface ${p.namespace}/${p.name}: eth0 ${res.ipconfigs.eth0.ip.join(', ')} in ${netns_path} (${ms.toFixed(1)} ms)`);
    }
    const backend = (await kni.QueryPodNetwork({ id: pods[1].id })).ipconfigs.eth0.ip;
    for (const ip of backend) {
      console.log(`== frontend pings backend at ${ip}`);
      process.stdout.write(execFileSync('nsenter', [`--net=${netns[0]}`, 'ping', '-c', '2', '-W', '2', ip], { encoding: 'utf8' }));
    }
    console.log('== knictl pods');
    knictl('pods');
    console.log('== knictl pod demo-sandbox-frontend');
    knictl('pod', pods[0].id);
    console.log(`== knictl trace demo/frontend ${backend[0]}   (the path a packet takes, hop by hop; nothing is sent)`);
    knictl('trace', 'demo/frontend', backend[0]);
    console.log('== knictl node');
    knictl('node');
    console.log('== knictl ipam');
    knictl('ipam');
  } finally {
    for (const p of pods) {
      await kni.DetachInterface({ id: p.id }).catch(() => undefined);
      await kni.DeleteNetwork({ id: p.id }).catch(() => undefined);
    }
    for (const n of netns) await kni.DeleteNetwork({ netns_path: n }).catch(() => undefined);
    console.log('== after DetachInterface + DeleteNetwork');
    knictl('ipam');
    kni.close();
    rt.close();
  }
}

main().catch((e) => {
  console.error(`demo failed: ${(e as Error).message}`);
  process.exit(1);
});
