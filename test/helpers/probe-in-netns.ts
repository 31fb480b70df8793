// Run by peer-probe.test.ts inside a test netns (nsenter), one side of kni's peer probe each:
//   listen <address> <port> <podMtu>: a PeerProbe listening (segments cut to podMtu; 0: not),
//     "listening" on a line once it does, until its stdin closes;
//   probe <address> <source> <port> <timeoutSeconds>: one probe; its result as JSON on the last line.
import { PeerProbe } from '../../plugin/node/peer-probe';

async function main(): Promise<void> {
  const [mode, ...args] = process.argv.slice(2);
  if (mode === 'listen') {
    const [address, port, mtu] = args;
    const probe = new PeerProbe(() => ({ port: Number(port), intervalSeconds: 30, timeoutSeconds: 1 }), 'kni test', () => Number(mtu));
    probe.listen([address]);
    await new Promise((r) => setTimeout(r, 200));
    process.stdout.write('\nlistening\n');
    process.stdin.resume();
    process.stdin.on('end', () => probe.stop());
    return;
  }
  const [address, source, port, timeoutSeconds] = args;
  const probe = new PeerProbe(() => ({ port: Number(port), intervalSeconds: 30, timeoutSeconds: Number(timeoutSeconds) }), 'kni test');
  await probe.probeAll([{ destination: '10.0.1.0/24', address, source }]);
  // Last, on a line of its own: the probe logs to stdout too.
  process.stdout.write(`\n${JSON.stringify(probe.result('10.0.1.0/24'))}\n`);
}

void main();
