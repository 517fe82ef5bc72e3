// Mastra: an Agent with the two tools (createTool) on a scripted model (AI SDK 6's
// MockLanguageModelV3 from `ai/test`, which Mastra runs as any AI SDK model), traced by
// Mastra's own observability and exported with its OpenTelemetry exporter
// (@mastra/otel-exporter, `provider: { custom: { endpoint, protocol } }`), the set-up its
// docs give:
//
//   node agent.mjs <scenario>
import { Mastra } from '@mastra/core/mastra';
import { Agent } from '@mastra/core/agent';
import { createTool } from '@mastra/core/tools';
import { Observability } from '@mastra/observability';
import { OtelExporter } from '@mastra/otel-exporter';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import { DESCRIPTIONS, TOOLS, scenarioFromArgv } from '../_common/scripted.mjs';
import { scriptedModel } from '../_common/ai_sdk.mjs';

const { scenario } = scenarioFromArgv();
const endpoint = `${process.env.OTEL_EXPORTER_OTLP_ENDPOINT}/v1/traces`;
const exporter = new OtelExporter({ provider: { custom: { endpoint, protocol: 'http/protobuf' } } });
const SCHEMAS = { lookup_order: z.object({ order_id: z.string() }), search_docs: z.object({ query: z.string() }) };
const tools = Object.fromEntries(Object.entries(TOOLS).map(([name, fn]) => [name, createTool({
  id: name, description: DESCRIPTIONS[name], inputSchema: SCHEMAS[name], execute: async input => fn(input),
})]));
const agent = new Agent({
  id: 'support-agent', name: 'support-agent', instructions: 'You are a support agent. Use the tools.',
  model: scriptedModel(MockLanguageModelV3, 'v3', scenario), tools,
});
const mastra = new Mastra({
  agents: { agent },
  observability: new Observability({
    configs: { otel: { serviceName: process.env.OTEL_SERVICE_NAME, exporters: [exporter] } },
  }),
});
const result = await mastra.getAgent('agent').generate('Help the customer with their order and the refund policy.',
                                                       { maxSteps: 20 });
console.log(result.text);
await mastra.shutdown?.();
await exporter.shutdown?.();
