// AI SDK 6 (`ai`) with `experimental_telemetry: { isEnabled: true, functionId }` on the call,
// the SDK's own ai.* spans through the globally registered tracer provider:
//
//   node agent.mjs <scenario> [--stream]
import * as ai from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { startTracing } from '../_common/otel.mjs';
import { scenarioFromArgv } from '../_common/scripted.mjs';
import { runAgent, scriptedModel } from '../_common/ai_sdk.mjs';

const { scenario, flags } = scenarioFromArgv();
const provider = startTracing();
const text = await runAgent(ai, {
  model: scriptedModel(MockLanguageModelV3, 'v3', scenario),
  stream: flags.includes('--stream'),
  options: { experimental_telemetry: { isEnabled: true, functionId: 'support-agent' } },
});
console.log(text);
await provider.shutdown();
