// The AI SDK agent every ai_sdk_* set-up runs: generateText (or streamText with --stream)
// with the two tools and a scripted model, the SDK's own mock model from `ai/test`
// (MockLanguageModelV3 in AI SDK 6, V4 in 7) playing the scenario's script; for AI SDK 5,
// whose `ai/test` imports vitest and msw, a plain LanguageModelV2 object (the interface of
// `@ai-sdk/provider` that MockLanguageModelV2 implements).
// The caller passes the package's exports, so that each set-up's own `ai` is used.
//
// Issue 29's model scenarios: the model plays modelScript, one move per call (reasoning as a
// `reasoning` content part). unknown_tool*: the AI SDK itself turns a call of a tool it does
// not have into a `tool-error` result (NoSuchToolError) and calls the model again. text_* and
// reasoning_*: a text (or reasoning-only) answer ends generateText, so the application checks
// the answer and calls again with the conversation and its feedback as a user message, the
// whole conversation under one span of its own (docs/runs.md: one trace per conversation).
// refused_tool*: cancel_order is a `needsApproval` tool, so generateText stops with a
// `tool-approval-request`; the application answers with a `tool-approval-response` that
// denies it (the SDK's human-in-the-loop pattern) and calls again, under the same span.
import {
  DESCRIPTIONS, MODEL_LOOP_TURNS, MODEL_SCENARIOS, REFUSAL, REFUSED_TOOL, REJECTION, SCHEMAS, TOOLS, answerAccepted,
  callId, cancelOrder, modelMove, nextStep,
} from './scripted.mjs';

// The model answers and the tools return at once: the OpenTelemetry JS SDK stamps span
// starts in whole milliseconds, so a model call, the tool call it made and the next model
// call often start in the same one, and otel-progress orders them by their call ids
// (otel_progress/runs/causal.py; tests/frameworks_js/FINDINGS.md, "Start times").

function toolResults(prompt) {
  let done = 0;
  for (const message of prompt ?? []) {
    if (message.role !== 'tool') continue;
    for (const part of message.content ?? []) if (part.type === 'tool-result') done += 1;
  }
  return done;
}

function finish(spec, reason) {
  if (spec === 'v2') return reason;
  return { unified: reason, raw: reason === 'tool-calls' ? 'tool_calls' : reason };
}

function usage(spec) {
  if (spec === 'v2') return { inputTokens: 120, outputTokens: 20, totalTokens: 140 };
  return { inputTokens: { total: 120, noCache: 120, cacheRead: 0, cacheWrite: 0 },
           outputTokens: { total: 20, text: 20, reasoning: 0 } };
}

/** The scripted model (`Mock`: the SDK's MockLanguageModelV*, or null for a plain model
 * object; `spec`: 'v2', 'v3' or 'v4'). */
export function scriptedModel(Mock, spec, scenario) {
  let responses = 0;
  const modelMoveFor = () => {
    const m = modelMove(scenario, responses++);
    const call = m.tool
      ? { type: 'tool-call', toolCallId: callId(), toolName: m.tool[0], input: JSON.stringify(m.tool[1]) } : null;
    return { text: m.text, reasoning: m.reasoning, call };
  };
  const move = options => {
    if (MODEL_SCENARIOS.includes(scenario)) return modelMoveFor();
    const step = nextStep(scenario, toolResults(options.prompt));
    if (typeof step === 'string') return { text: step };
    const [toolName, args] = step;
    return { call: { type: 'tool-call', toolCallId: callId(), toolName, input: JSON.stringify(args) } };
  };
  const model = {
    provider: 'scripted',
    modelId: 'scripted-model',
    doGenerate: async options => {
      const m = move(options);
      const content = [];
      if (m.reasoning) content.push({ type: 'reasoning', text: m.reasoning });
      if (m.text) content.push({ type: 'text', text: m.text });
      if (m.call) content.push(m.call);
      return { content, finishReason: finish(spec, m.call ? 'tool-calls' : 'stop'), usage: usage(spec), warnings: [] };
    },
    doStream: async options => {
      const m = move(options);
      const parts = [{ type: 'stream-start', warnings: [] }];
      if (m.reasoning) {
        parts.push({ type: 'reasoning-start', id: 'r0' }, { type: 'reasoning-delta', id: 'r0', delta: m.reasoning },
                   { type: 'reasoning-end', id: 'r0' });
      }
      if (m.call) parts.push(m.call);
      else if (m.text) parts.push({ type: 'text-start', id: 't0' }, { type: 'text-delta', id: 't0', delta: m.text },
                      { type: 'text-end', id: 't0' });
      parts.push({ type: 'finish', finishReason: finish(spec, m.call ? 'tool-calls' : 'stop'), usage: usage(spec) });
      const stream = new ReadableStream({ start(c) { for (const p of parts) c.enqueue(p); c.close(); } });
      return { stream };
    },
  };
  return Mock ? new Mock(model) : { specificationVersion: spec, supportedUrls: {}, ...model };
}

/** The two tools, made with the SDK's `tool` and `jsonSchema`; with `approval`, also
 * cancel_order, which needs the user's approval. */
export function tools({ tool, jsonSchema }, approval = false) {
  const made = Object.fromEntries(Object.entries(TOOLS).map(([name, fn]) => [name, tool({
    description: DESCRIPTIONS[name],
    inputSchema: jsonSchema(SCHEMAS[name]),
    execute: async args => {
      return fn(args);
    },
  })]));
  if (approval) {
    made[REFUSED_TOOL] = tool({
      description: 'Cancel an order (needs the user\'s approval).',
      inputSchema: jsonSchema(SCHEMAS.lookup_order),
      needsApproval: true,
      execute: async args => cancelOrder(args),
    });
  }
  return made;
}

const PROMPT = 'Help the customer with their order and the refund policy.';

async function once(ai, call, stream) {
  if (!stream) {
    const result = await ai.generateText(call);
    return { text: result.text, messages: result.response.messages, content: result.content };
  }
  const result = ai.streamText(call);
  let text = '';
  for await (const delta of result.textStream) text += delta;
  return { text, messages: (await result.response).messages, content: await result.content };
}

/** One run of the tool loop; `options` are merged into the call (telemetry settings). With a
 * `checked` scenario (text_*, reasoning_*) and a `tracer`, the application's check-and-retry
 * loop above, under one span. */
export async function runAgent(ai, { model, stream, options, scenario = '', tracer = null }) {
  const call = {
    model,
    system: 'You are a support agent. Use the tools.',
    tools: tools(ai, scenario.startsWith('refused_')),
    stopWhen: ai.stepCountIs(20),
    ...options,
  };
  const refusing = scenario.startsWith('refused_');
  if (!(scenario.startsWith('text_') || scenario.startsWith('reasoning_') || refusing)) {
    return (await once(ai, { ...call, prompt: PROMPT }, stream)).text;
  }
  return tracer.startActiveSpan('support-conversation', async span => {
    let messages = [{ role: 'user', content: PROMPT }];
    let text = '';
    let answered = [];  // the denial the model has just been given, kept as a tool result for later calls
    for (let i = 0; i < MODEL_LOOP_TURNS + 2; i++) {
      const result = await once(ai, { ...call, messages }, stream);
      text = result.text;
      if (refusing) {
        // the SDK turns a denied approval into an `execution-denied` tool result for the call
        // that follows it, but keeps it out of response.messages: later calls need it too
        for (const [message, part] of answered) {
          message.content.push({ type: 'tool-result', toolCallId: part.toolCall.toolCallId,
                                 toolName: part.toolCall.toolName,
                                 output: { type: 'execution-denied', reason: REFUSAL } });
        }
        const asked = result.content.filter(part => part.type === 'tool-approval-request');
        if (!asked.length) break;
        const denial = { role: 'tool', content: asked.map(part => ({
          type: 'tool-approval-response', approvalId: part.approvalId, approved: false, reason: REFUSAL })) };
        answered = asked.map(part => [denial, part]);
        messages = [...messages, ...result.messages, denial];
        continue;
      }
      if (answerAccepted(text)) break;
      messages = [...messages, ...result.messages, { role: 'user', content: REJECTION }];
    }
    span.end();
    return text;
  });
}
