// Run by bench/policy.ts inside a pod's netns (nsenter): TCP connections tried as a pod's client
// tries them. One command per stdin line:
//   watch IP PORT        a connection every 10 ms (each given 150 ms), a line per attempt:
//                        "probe <start ms since the epoch> <1|0>", until the next command
//   connects IP PORT N   N connections one after another: "connects <JSON list of ms each>"
//   send IP PORT BYTES   one connection carrying BYTES: "sent <ms>"
// and, started as `policy-prober sink PORT`, a listener that drains every connection.
import net from 'node:net';
import readline from 'node:readline';

const tryConnect = (ip: string, port: number, timeoutMs: number): Promise<boolean> =>
  new Promise((resolve) => {
    const s = net.connect({ host: ip, port });
    const done = (ok: boolean) => {
      clearTimeout(timer);
      s.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });

let watching = 0;

async function watch(ip: string, port: number, id: number): Promise<void> {
  while (watching === id) {
    const start = Date.now();
    const ok = await tryConnect(ip, port, 150);
    if (watching !== id) return;
    process.stdout.write(`probe ${start} ${ok ? 1 : 0}\n`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function connects(ip: string, port: number, n: number): Promise<void> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    if (!(await tryConnect(ip, port, 2000))) throw new Error(`connection ${i} to ${ip}:${port} failed`);
    ms.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  process.stdout.write(`connects ${JSON.stringify(ms)}\n`);
}

function send(ip: string, port: number, bytes: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = process.hrtime.bigint();
    const s = net.connect({ host: ip, port }, () => {
      const chunk = Buffer.alloc(1 << 20);
      let left = bytes;
      const more = () => {
        while (left > 0) {
          left -= chunk.length;
          if (!s.write(chunk)) return void s.once('drain', more);
        }
        s.end();
      };
      more();
    });
    s.on('close', () => {
      process.stdout.write(`sent ${Number(process.hrtime.bigint() - t) / 1e6}\n`);
      resolve();
    });
    s.on('error', reject);
  });
}

async function main(): Promise<void> {
  if (process.argv[2] === 'sink') {
    net.createServer((c) => c.on('data', () => undefined).on('error', () => undefined)).listen(Number(process.argv[3]), () => process.stdout.write('listening\n'));
    return;
  }
  process.stdout.write('ready\n');
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const [verb, ip, port, n] = line.trim().split(/\s+/);
    watching++;
    try {
      if (verb === 'watch') void watch(ip, Number(port), watching);
      else if (verb === 'connects') await connects(ip, Number(port), Number(n));
      else if (verb === 'send') await send(ip, Number(port), Number(n));
    } catch (e) {
      process.stdout.write(`error ${(e as Error).message}\n`);
    }
  }
  watching++;
}

void main();
