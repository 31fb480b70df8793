// The message codecs made ahead once the daemon serves (plugin/server/codec-warmup.ts): every
// type of every method is reached, samples survive a round trip, and the daemon does it.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import * as protoLoader from '@grpc/proto-loader';
import { indexMessageTypes, sampleMessage, warmCodecs } from '../plugin/server/codec-warmup';
import { extensionService, kniService, LOADER_OPTIONS, loadProto, runtimeService } from '../plugin/server/protos';
import { guardRequests } from '../plugin/server/request-guard';
import { podNetworkLifecycleService } from '../runtime-hooks/containerd/pod-network-lifecycle';
import { RUN } from './helpers/sh';
import { TestDaemon } from './helpers/test-daemon';
import { waitFor } from './helpers/wait';

describe('message codecs made ahead', () => {
  it("reaches each method's request and answer and every message inside them, for the daemon's three services, with no failure", async () => {
    const services = [kniService().service, runtimeService().service, podNetworkLifecycleService()].map(guardRequests);
    const { types, failed } = await warmCodecs(services);
    assert.deepEqual(failed, []);
    for (const t of ['kni.AttachInterfaceRequest', 'kni.Isolation', 'kni.PortMapping', 'kni.runtime.v1.AttachRequest', 'kni.runtime.v1.PodRef', 'kni.runtime.v1.PodNetwork', 'kni.runtime.v1.Interface', 'kni.runtime.v1.IPAddress', 'kni.runtime.v1.Route', 'kni.runtime.v1.DetachResponse', 'containerd.services.networking.v1.SetupPodNetworkResponse', 'containerd.services.networking.v1.NetworkInterface']) {
      assert.ok(types.has(t), `${t} not reached (reached: ${[...types].join(' ')})`);
    }
    // One request and one answer type per method at least.
    const methods = services.reduce((n, s) => n + Object.keys(s).length, 0);
    assert.ok(types.size >= methods, `${types.size} types for ${methods} methods`);
  });

  it('a sample holds one of each nested message, a map of messages gets an entry, a type on its own path is not entered again, and it survives a round trip', () => {
    const file = `/tmp/${RUN}-sample.proto`;
    fs.writeFileSync(file, `syntax = "proto3";
      package sampletest;
      message Leaf { string s = 1; }
      message Tree {
        Tree child = 1;
        repeated Leaf leaves = 2;
        map<string, Leaf> by_name = 3;
        map<string, string> tags = 4;
        string name = 5;
        message Inner { Leaf leaf = 1; }
        Inner inner = 6;
      }
      service S { rpc Grow(Tree) returns (Leaf); }`);
    try {
      const def = protoLoader.loadSync(file, LOADER_OPTIONS);
      indexMessageTypes(def);
      const seen = new Set<string>();
      const sample = sampleMessage('sampletest.Tree', seen);
      assert.deepEqual(sample, { child: {}, leaves: [{}], by_name: { 1: {} }, inner: { leaf: {} } });
      assert.deepEqual([...seen].sort(), ['sampletest.Leaf', 'sampletest.Tree', 'sampletest.Tree.Inner']);
      const grow = (def['sampletest.S'] as protoLoader.ServiceDefinition).Grow;
      const back = grow.requestDeserialize(grow.requestSerialize(sample)) as Record<string, unknown>;
      assert.deepEqual(back.leaves, [{ s: '' }]);
      assert.deepEqual(back.by_name, { 1: { s: '' } });
    } finally {
      fs.rmSync(file, { force: true });
    }
  });

  it('a proto file is loaded once: the CRI reconcile and each extension connection get the same types, whose codecs are made once', () => {
    assert.equal(loadProto('cri/runtime_v1.proto'), loadProto('cri/runtime_v1.proto'));
    assert.equal(extensionService(), extensionService());
  });

  it('the daemon makes them once it serves, and says so at debug level', async () => {
    const d = await TestDaemon.start({}, { env: { KNI_LOG_LEVEL: 'debug' } });
    try {
      await d.rt().GetNode({});
      const lineOf = () => d.output.split('\n').find((x) => x.includes('"msg":"message codecs made ahead"'));
      await waitFor(() => lineOf() !== undefined, 5000, () => d.output.slice(-2000));
      const line = JSON.parse(lineOf()!) as { level: string; types: number; failed?: string[] };
      assert.equal(line.level, 'debug');
      assert.equal(line.failed, undefined);
      assert.ok(line.types >= 60, `only ${line.types} types`);
      assert.ok(d.output.indexOf('"msg":"serving"') < d.output.indexOf('"msg":"message codecs made ahead"'));
    } finally {
      d.cleanup();
    }
  });
});
