// The OpenAI Agents SDK for JavaScript (@openai/agents): an Agent with the two tools on a
// scripted model (an implementation of the SDK's public `Model` interface that plays the
// scenario's script), traced through OpenInference's trace processor, registered as its
// README says for ESM (`new OpenAIAgentsInstrumentation({ tracerProvider }).manuallyInstrument(agents)`).
//
//   node agent.mjs <scenario>
import * as agents from '@openai/agents';
import { OpenAIAgentsInstrumentation } from '@arizeai/openinference-instrumentation-openai-agents';
import { z } from 'zod';
import { startTracing } from '../_common/otel.mjs';
import { DESCRIPTIONS, TOOLS, callId, nextStep, scenarioFromArgv } from '../_common/scripted.mjs';

const { scenario } = scenarioFromArgv();
const provider = startTracing();
new OpenAIAgentsInstrumentation({ tracerProvider: provider }).manuallyInstrument(agents);

class ScriptedModel {
  async getResponse(request) {
    const items = Array.isArray(request.input) ? request.input : [];
    const done = items.filter(item => item.type === 'function_call_result').length;
    const step = nextStep(scenario, done);
    const usage = new agents.Usage({ requests: 1, inputTokens: 120, outputTokens: 20, totalTokens: 140 });
    if (typeof step === 'string') {
      return { usage, responseId: `resp_${done}`, output: [{ type: 'message', role: 'assistant', status: 'completed',
        id: `msg_${done}`, content: [{ type: 'output_text', text: step }] }] };
    }
    const id = callId();
    return { usage, responseId: `resp_${done}`, output: [{ type: 'function_call', id: `fc_${id}`, callId: id,
      name: step[0], arguments: JSON.stringify(step[1]), status: 'completed' }] };
  }

  async *getStreamedResponse() {
    throw new Error('the scripted model does not stream');
  }
}

const SCHEMAS = { lookup_order: z.object({ order_id: z.string() }), search_docs: z.object({ query: z.string() }) };
const tools = Object.entries(TOOLS).map(([name, fn]) => agents.tool({
  name, description: DESCRIPTIONS[name], parameters: SCHEMAS[name], execute: async args => JSON.stringify(fn(args)),
}));
const agent = new agents.Agent({ name: 'support_agent', instructions: 'You are a support agent. Use the tools.',
                                 tools, model: new ScriptedModel() });
const result = await agents.run(agent, 'Help the customer with their order and the refund policy.', { maxTurns: 30 });
console.log(result.finalOutput);
await agents.getGlobalTraceProvider().forceFlush();
await provider.shutdown();
