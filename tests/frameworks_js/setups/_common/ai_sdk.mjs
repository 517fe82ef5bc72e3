// The AI SDK agent every ai_sdk_* set-up runs: generateText (or streamText with --stream)
// with the two tools and a scripted model, the SDK's own mock model from `ai/test`
// (MockLanguageModelV3 in AI SDK 6, V4 in 7) playing the scenario's script; for AI SDK 5,
// whose `ai/test` imports vitest and msw, a plain LanguageModelV2 object (the interface of
// `@ai-sdk/provider` that MockLanguageModelV2 implements).
// The caller passes the package's exports, so that each set-up's own `ai` is used.
import { DESCRIPTIONS, SCHEMAS, TOOLS, callId, nextStep } from './scripted.mjs';

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
  const move = options => {
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
      const content = m.call ? [m.call] : [{ type: 'text', text: m.text }];
      return { content, finishReason: finish(spec, m.call ? 'tool-calls' : 'stop'), usage: usage(spec), warnings: [] };
    },
    doStream: async options => {
      const m = move(options);
      const parts = [{ type: 'stream-start', warnings: [] }];
      if (m.call) parts.push(m.call);
      else parts.push({ type: 'text-start', id: 't0' }, { type: 'text-delta', id: 't0', delta: m.text },
                      { type: 'text-end', id: 't0' });
      parts.push({ type: 'finish', finishReason: finish(spec, m.call ? 'tool-calls' : 'stop'), usage: usage(spec) });
      const stream = new ReadableStream({ start(c) { for (const p of parts) c.enqueue(p); c.close(); } });
      return { stream };
    },
  };
  return Mock ? new Mock(model) : { specificationVersion: spec, supportedUrls: {}, ...model };
}

/** The two tools, made with the SDK's `tool` and `jsonSchema`. */
export function tools({ tool, jsonSchema }) {
  return Object.fromEntries(Object.entries(TOOLS).map(([name, fn]) => [name, tool({
    description: DESCRIPTIONS[name],
    inputSchema: jsonSchema(SCHEMAS[name]),
    execute: async args => {
      return fn(args);
    },
  })]));
}

/** One run of the tool loop; `options` are merged into the call (telemetry settings). */
export async function runAgent(ai, { model, stream, options }) {
  const call = {
    model,
    system: 'You are a support agent. Use the tools.',
    prompt: 'Help the customer with their order and the refund policy.',
    tools: tools(ai),
    stopWhen: ai.stepCountIs(20),
    ...options,
  };
  if (!stream) return (await ai.generateText(call)).text;
  const result = ai.streamText(call);
  let text = '';
  for await (const delta of result.textStream) text += delta;
  return text;
}
