#!/usr/bin/env node
// kni-runtime: the network runtime daemon.
import { Command } from 'commander';
import { ConfigError, loadConfig } from './core/config';
import { log, setLogLevel } from './core/log';
import { NetworkRuntime } from './core/network-runtime';
import { clearStaleSocket, serve } from './server/server';

async function main(): Promise<void> {
  const program = new Command()
    .name('kni-runtime')
    .description('kni network runtime: serves the KNI API on a unix socket and wires pod networks')
    .option('--socket <path>', 'unix socket to serve on', '/run/kni/kni.sock')
    .option('--state-dir <dir>', 'where sandbox records are kept', '/var/lib/kni')
    .option('--config <file>', 'YAML or JSON config (default: the embedded default network)')
    .option('--log-level <level>', 'debug, info, warn or error', process.env.KNI_LOG_LEVEL ?? 'info')
    .option('--print-config', 'print the effective config and exit')
    .parse();
  const opts = program.opts<{ socket: string; stateDir: string; config?: string; logLevel: string; printConfig?: boolean }>();
  setLogLevel(opts.logLevel);
  const cfg = loadConfig(opts.config);
  if (opts.printConfig) {
    process.stdout.write(`${JSON.stringify({ ...cfg, ranges: cfg.ranges.map((c) => c.text) }, null, 2)}\n`);
    return;
  }
  if (process.getuid?.() !== 0) throw new Error('kni-runtime must run as root (it creates network namespaces and links)');

  // Before touching anything: a second daemon must not set up (or change) the node network.
  await clearStaleSocket(opts.socket);
  const rt = new NetworkRuntime(cfg, opts.stateDir);
  await rt.start();
  const server = await serve(rt, opts.socket);
  log('info', 'serving', { socket: opts.socket, stateDir: opts.stateDir, config: opts.config ?? '(embedded default)' });

  const shutdown = (signal: string) => {
    log('info', 'shutting down; pods stay as they are', { signal });
    server.tryShutdown(() => {
      rt.stop();
      process.exit(0);
    });
    setTimeout(() => process.exit(0), 3000).unref();
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}

main().catch((e) => {
  const msg = e instanceof ConfigError ? e.message : (e as Error).stack ?? String(e);
  log('error', 'kni-runtime failed to start', { error: msg });
  process.stderr.write(`kni-runtime: ${e instanceof ConfigError ? msg : (e as Error).message}\n`);
  process.exit(1);
});
