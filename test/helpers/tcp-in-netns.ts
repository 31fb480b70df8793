// One side of a TCP transfer, run inside a test netns (nsenter):
//   sink <port>: accepts one connection on every address, prints "listening" once it listens and
//     "received N" when the peer has closed after N bytes, then exits;
//   send <address> <port> <bytes>: sends that many bytes and closes, prints "sent N", exits 0
//     (1 with the error).
import net from 'node:net';

const [mode, ...args] = process.argv.slice(2);
if (mode === 'sink') {
  const server = net.createServer((c) => {
    let n = 0;
    c.on('data', (b) => (n += b.length));
    c.on('end', () => {
      process.stdout.write(`received ${n}\n`);
      c.end();
      server.close();
    });
  });
  server.listen(Number(args[0]), '::', () => process.stdout.write('listening\n'));
} else if (mode === 'send') {
  const [host, port, bytes] = args;
  const c = net.connect(Number(port), host, () => {
    c.end(Buffer.alloc(Number(bytes)));
  });
  c.setTimeout(60_000, () => c.destroy(new Error('no progress for 60 s')));
  c.on('data', () => undefined);
  c.on('close', (hadError) => {
    if (!hadError) process.stdout.write(`sent ${bytes}\n`);
  });
  c.on('error', (e) => {
    process.stderr.write(`${e.message}\n`);
    process.exitCode = 1;
  });
} else {
  process.stderr.write('usage: tcp-in-netns sink <port> | send <address> <port> <bytes>\n');
  process.exitCode = 2;
}
