// AI SDK 7 (`ai`) with one of its two OpenTelemetry integrations from `@ai-sdk/otel`,
// registered once as its docs say (`registerTelemetry(new OpenTelemetry())`):
//
//   node agent.mjs <scenario> [--integration otel|legacy] [--stream] [--openinference] [--no-content]
//
// otel: `OpenTelemetry` (GenAI conventions: invoke_agent, step N, chat, execute_tool);
// legacy: `LegacyOpenTelemetry` (the ai.* spans of AI SDK 4-6: ai.generateText,
// ai.generateText.doGenerate, ai.toolCall). --openinference: OpenInference's span processor
// (@arizeai/openinference-vercel) in place of the SDK's batch processor, as its README says;
// --no-content: `recordInputs: false, recordOutputs: false` on the call.
import * as ai from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { LegacyOpenTelemetry, OpenTelemetry } from '@ai-sdk/otel';
import { OpenInferenceBatchSpanProcessor } from '@arizeai/openinference-vercel';
import { startTracing } from '../_common/otel.mjs';
import { flag, scenarioFromArgv } from '../_common/scripted.mjs';
import { runAgent, scriptedModel } from '../_common/ai_sdk.mjs';

const { scenario, flags } = scenarioFromArgv();
const provider = flags.includes('--openinference')
  ? startTracing(exporter => new OpenInferenceBatchSpanProcessor({ exporter }))
  : startTracing();
const integration = flag(flags, 'integration', 'otel');
ai.registerTelemetry(integration === 'legacy' ? new LegacyOpenTelemetry() : new OpenTelemetry());
const text = await runAgent(ai, {
  model: scriptedModel(MockLanguageModelV4, 'v4', scenario),
  stream: flags.includes('--stream'),
  scenario,
  tracer: provider.getTracer('support-app'),
  options: { telemetry: { functionId: 'support-agent',
                          ...(flags.includes('--no-content') ? { recordInputs: false, recordOutputs: false } : {}) } },
});
console.log(text);
await provider.shutdown();
