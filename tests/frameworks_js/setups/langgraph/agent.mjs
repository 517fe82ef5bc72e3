// LangGraph.js: the prebuilt ReAct agent (createReactAgent) with the two tools on a scripted
// chat model (a BaseChatModel of @langchain/core that plays the scenario's script), traced
// through one LangChain.js instrumentation, registered as its README says
// (`manuallyInstrument` with @langchain/core/callbacks/manager):
//
//   node agent.mjs <scenario> --instrumentation openinference|openllmetry [--request-span yes]
//
// --request-span: the agent is invoked inside a span, as in a server whose HTTP
// instrumentation opens one per request. OpenLLMetry's callback handler starts its spans
// in the active context without linking them to each other, so without one every span is
// a trace of its own, and otel-progress never merges traces that name no conversation.
import * as CallbackManagerModule from '@langchain/core/callbacks/manager';
import { BaseChatModel } from '@langchain/core/language_models/chat_models';
import { AIMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { createReactAgent } from '@langchain/langgraph/prebuilt';
import { LangChainInstrumentation as OpenInference } from '@arizeai/openinference-instrumentation-langchain';
import { LangChainInstrumentation as OpenLLMetry } from '@traceloop/instrumentation-langchain';
import { trace } from '@opentelemetry/api';
import { z } from 'zod';
import { startTracing } from '../_common/otel.mjs';
import { DESCRIPTIONS, TOOLS, callId, flag, nextStep, scenarioFromArgv } from '../_common/scripted.mjs';

const { scenario, flags } = scenarioFromArgv();
const provider = startTracing();
const which = flag(flags, 'instrumentation', 'openinference');
if (which === 'openinference') new OpenInference().manuallyInstrument(CallbackManagerModule);
else if (which === 'openllmetry') new OpenLLMetry().manuallyInstrument({ callbackManagerModule: CallbackManagerModule });
else throw new Error(`unknown instrumentation ${which}`);

class ScriptedChatModel extends BaseChatModel {
  _llmType() { return 'scripted'; }
  bindTools() { return this; }
  async _generate(messages) {
    const done = messages.filter(m => m.getType() === 'tool').length;
    const step = nextStep(scenario, done);
    const message = typeof step === 'string'
      ? new AIMessage(step)
      : new AIMessage({ content: '', tool_calls: [{ id: callId(), name: step[0], args: step[1], type: 'tool_call' }] });
    return { generations: [{ text: typeof step === 'string' ? step : '', message }],
             llmOutput: { tokenUsage: { promptTokens: 120, completionTokens: 20, totalTokens: 140 } } };
  }
}

const SCHEMAS = { lookup_order: z.object({ order_id: z.string() }), search_docs: z.object({ query: z.string() }) };
const tools = Object.entries(TOOLS).map(([name, fn]) =>
  tool(async args => JSON.stringify(fn(args)), { name, description: DESCRIPTIONS[name], schema: SCHEMAS[name] }));
const agent = createReactAgent({ llm: new ScriptedChatModel({}), tools, name: 'support_agent' });
const ask = () => agent.invoke(
  { messages: [{ role: 'user', content: 'Help the customer with their order and the refund policy.' }] },
  { recursionLimit: 60 });
const result = flag(flags, 'request-span', 'no') === 'yes'
  ? await trace.getTracer('support-app').startActiveSpan('POST /support', async span => {
    try { return await ask(); } finally { span.end(); }
  })
  : await ask();
console.log(result.messages.at(-1).content);
await provider.shutdown();
