// Run by node-guards.test.ts inside a test netns (nsenter): kni's guard tables written there with
// the probe port and peers given, then one line on stdin per change of the peers
// ("peers a,b"), answered "ok" (or the error) once the kernel has it.
import readline from 'node:readline';
import { NodeGuards } from '../../plugin/node/node-guards';

async function main(): Promise<void> {
  const [port, peers] = process.argv.slice(2);
  const guards = new NodeGuards();
  const list = (s: string | undefined): string[] => (s ? s.split(',').filter(Boolean) : []);
  await guards.write(Number(port), [], list(peers));
  process.stdout.write('ready\n');
  for await (const line of readline.createInterface({ input: process.stdin })) {
    try {
      const [verb, arg] = line.split(' ');
      if (verb === 'peers') guards.setPeers(list(arg));
      else if (verb === 'remove') await guards.removeTables();
      process.stdout.write('ok\n');
    } catch (e) {
      process.stdout.write(`error ${(e as Error).message}\n`);
    }
  }
  guards.close();
}

void main();
