// kni-runtime with spans kept in memory (InMemorySpanExporter): on SIGUSR2 it writes the
// finished spans (name, ids, parent, attributes, status) as JSON to $KNI_TEST_SPANS_FILE.
import fs from 'node:fs';
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { enableTracing } from '../../plugin/observe/tracing';

const exporter = new InMemorySpanExporter();
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
enableTracing(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));

process.on('SIGUSR2', () => {
  const spans = exporter.getFinishedSpans().map((s) => ({
    name: s.name,
    traceId: s.spanContext().traceId,
    spanId: s.spanContext().spanId,
    parentSpanId: s.parentSpanContext?.spanId ?? '',
    attributes: s.attributes,
    status: s.status.code,
    ms: s.duration[0] * 1e3 + s.duration[1] / 1e6,
  }));
  // Whole or not at all: the test reads the file as soon as it exists.
  const file = process.env.KNI_TEST_SPANS_FILE!;
  fs.writeFileSync(`${file}.tmp`, JSON.stringify(spans));
  fs.renameSync(`${file}.tmp`, file);
});

require('../../plugin/main');
