// AI SDK 6 with `experimental_telemetry` traced through OpenLLMetry for JavaScript
// (@traceloop/node-server-sdk), which turns the SDK's ai.* spans into its own shape when
// they end (`traceloop.span.kind`, `traceloop.entity.*`, `gen_ai.*`), set up as its docs
// say (`traceloop.initialize({ exporter })` to send to one's own Collector):
//
//   node agent.mjs <scenario>
import * as ai from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import * as traceloop from '@traceloop/node-server-sdk';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { scenarioFromArgv } from '../_common/scripted.mjs';
import { runAgent, scriptedModel } from '../_common/ai_sdk.mjs';

const { scenario } = scenarioFromArgv();
traceloop.initialize({
  appName: process.env.OTEL_SERVICE_NAME, exporter: new OTLPTraceExporter(), silenceInitializationMessage: true,
  traceloopSyncEnabled: false,
});
const text = await runAgent(ai, {
  model: scriptedModel(MockLanguageModelV3, 'v3', scenario),
  stream: false,
  options: { experimental_telemetry: { isEnabled: true, functionId: 'support-agent' } },
});
console.log(text);
await traceloop.forceFlush();
