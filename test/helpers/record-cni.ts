// A CNI plugin for chains in the tests that does nothing but write down what it was given: each
// call's command, container, interface, CNI_ARGS, runtimeConfig and the previous result's addresses go, one JSON line each, to the config's
// logFile; ADD and CHECK pass the previous result on. Run through a wrapper script in a CNI bin dir.
import fs from 'node:fs';

const env = process.env;
const conf = JSON.parse(fs.readFileSync(0, 'utf8') || '{}');
const cmd = env.CNI_COMMAND ?? '';
if (conf.logFile) fs.appendFileSync(conf.logFile, JSON.stringify({ cmd, containerId: env.CNI_CONTAINERID, ifName: env.CNI_IFNAME, args: env.CNI_ARGS ?? '', runtimeConfig: conf.runtimeConfig ?? {}, prevIps: conf.prevResult?.ips?.map((i: { address: string }) => i.address) }) + '\n');
if (cmd === 'VERSION') process.stdout.write(JSON.stringify({ cniVersion: '1.1.0', supportedVersions: ['0.4.0', '1.0.0', '1.1.0'] }));
else if (cmd === 'ADD') process.stdout.write(JSON.stringify(conf.prevResult ?? { cniVersion: conf.cniVersion, interfaces: [], ips: [] }));
