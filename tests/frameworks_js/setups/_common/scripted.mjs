// What every set-up's agent.mjs shares (no package imports, so it runs beside any
// framework's node_modules): the two tools, the model's script for each scenario, and the
// scenario from the command line. The same script as the Python matrix's
// tests/frameworks/setups/_common/scripted.py (tests/frameworks_js/test_harness.py checks
// that they agree).
//
//   loop          lookup_order({order_id: "A-17"}) eight times, the same record every time
//   empty_search  search_docs rephrased eight times, every result empty
//   healthy       six calls (orders and searches), each bringing something new, then the answer
//
// and issue 29's model scenarios (MODEL_SCENARIOS, run by the set-ups whose setups.toml lists
// them): a script of model moves ({text, reasoning, tool}), see modelScript.

export const SCENARIOS = ['loop', 'empty_search', 'healthy'];
export const MODEL_SCENARIOS = ['text_loop', 'text_healthy', 'reasoning_loop', 'reasoning_healthy', 'unknown_tool',
                                'unknown_tool_healthy', 'refused_tool', 'refused_tool_healthy'];
export const ALL_SCENARIOS = [...SCENARIOS, ...MODEL_SCENARIOS];
export const MODEL_LOOP_TURNS = 6;
export const UNKNOWN_TOOL = 'get_order_status';
export const LOOP_TEXT = 'I am looking into your order now and will get back to you shortly.';
export const REJECTION = 'The answer must name the order id (like A-17) and where it was shipped.';
export const REFUSED_TOOL = 'cancel_order';
export const REFUSAL = 'The user refused: do not cancel order A-17.';
export const LOOP_REASONING = 'The user wants the order status. I should look the order up before answering.';
export const MODEL_FINAL = 'Order A-17 has 2 items shipped to Berlin.';
export const LOOP_TURNS = 8;
export const HEALTHY_TURNS = 6;

export const ORDERS = {
  'A-17': { order_id: 'A-17', items: 2, shipped_to: 'Berlin', carrier: 'DHL' },
  'A-18': { order_id: 'A-18', items: 1, shipped_to: 'Lyon', carrier: 'UPS' },
  'A-19': { order_id: 'A-19', items: 5, shipped_to: 'Turin', carrier: 'GLS' },
};
export const DOCS = {
  shipping: ['Orders ship within 2 business days.', 'Express shipping costs 9 EUR.'],
  warranty: ['Every device has a 2-year warranty.'],
  returns: ['Unused items can be sent back within 30 days.'],
};
export const EMPTY_QUERIES = [
  'refund policy', 'refund policy for orders', 'how do I get a refund', 'money back policy',
  'refunds', 'refund rules for damaged items', 'reimbursement policy', 'get my money back',
  'refund terms', 'can I return for a refund', 'refund conditions', 'refund eligibility',
];
export const FINAL = {
  loop: 'Order A-17 has 2 items shipped to Berlin.',
  empty_search: 'I could not find the refund policy.',
  healthy: 'Orders ship in 2 days, devices have a 2-year warranty, and A-17, A-18, A-19 are shipped.',
};
const HEALTHY = [
  ['search_docs', { query: 'shipping times' }],
  ['lookup_order', { order_id: 'A-17' }],
  ['search_docs', { query: 'warranty length' }],
  ['lookup_order', { order_id: 'A-18' }],
  ['search_docs', { query: 'returns window' }],
  ['lookup_order', { order_id: 'A-19' }],
];

export const DESCRIPTIONS = {
  lookup_order: 'Look up an order by its id and return its record as JSON.',
  search_docs: 'Search the help-centre documents; returns the matching passages as JSON.',
};
export const SCHEMAS = {
  lookup_order: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] },
  search_docs: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
};

/** The order's record (an object), or an error record. */
export function lookupOrder({ order_id }) {
  return ORDERS[order_id] ?? { error: `no order ${order_id}` };
}

/** The passages whose topic is a word of the query. */
export function searchDocs({ query }) {
  const words = new Set(query.toLowerCase().replace(/\?/g, '').split(/\s+/));
  const hits = Object.entries(DOCS).flatMap(([topic, texts]) => (words.has(topic) ? texts : []));
  return { results: hits, total: hits.length };
}

export const TOOLS = { lookup_order: lookupOrder, search_docs: searchDocs };

/** The tool calls the model makes in `scenario`, in order (then it answers). */
export function script(scenario, turns = LOOP_TURNS) {
  turns = Math.min(turns, EMPTY_QUERIES.length);
  if (scenario === 'loop') return Array.from({ length: turns }, () => ['lookup_order', { order_id: 'A-17' }]);
  if (scenario === 'empty_search') return EMPTY_QUERIES.slice(0, turns).map(q => ['search_docs', { query: q }]);
  if (scenario === 'healthy') return HEALTHY.slice(0, HEALTHY_TURNS);
  throw new Error(`unknown scenario ${scenario}; choose from ${SCENARIOS.join(', ')}`);
}

/** The model's move after `done` tool results: `[tool, args]`, or the final answer (a string). */
export function nextStep(scenario, done) {
  const steps = script(scenario);
  return done < steps.length ? steps[done] : FINAL[scenario];
}

/** The tool refused_tool requests: it needs the user's approval (never given in the matrix). */
export function cancelOrder({ order_id }) {
  return { order_id, cancelled: true };
}

/** The agent's own check of a text answer in the text_* and reasoning_* scenarios. */
export function answerAccepted(text) {
  return text.includes('A-17') && text.includes('Berlin');
}

/** The model's moves in a model scenario, the last being the answer: {text, reasoning, tool}
 * (tool: [name, args] or null). */
export function modelScript(scenario, turns = MODEL_LOOP_TURNS) {
  const move = ({ text = null, reasoning = null, tool = null } = {}) => ({ text, reasoning, tool });
  const final = move({ text: MODEL_FINAL });
  const times = m => Array.from({ length: turns }, () => m);
  if (scenario === 'text_loop') return [...times(move({ text: LOOP_TEXT })), final];
  if (scenario === 'text_healthy') {
    return [move({ text: 'Let me check that order for you.' }),
            move({ text: 'Your order A-17 exists; I am checking where it went.' }), final];
  }
  if (scenario === 'reasoning_loop') return [...times(move({ reasoning: LOOP_REASONING })), final];
  if (scenario === 'reasoning_healthy') {
    return [move({ reasoning: 'The user asks about an order.' }),
            move({ reasoning: 'Order A-17 is the one in the question; it shipped with DHL to Berlin.' }), final];
  }
  if (scenario === 'unknown_tool') return [...times(move({ tool: [UNKNOWN_TOOL, { order_id: 'A-17' }] })), final];
  if (scenario === 'refused_tool') return [...times(move({ tool: [REFUSED_TOOL, { order_id: 'A-17' }] })), final];
  if (scenario === 'refused_tool_healthy') {
    return [move({ tool: [REFUSED_TOOL, { order_id: 'A-17' }] }), move({ tool: ['lookup_order', { order_id: 'A-17' }] }),
            final];
  }
  if (scenario === 'unknown_tool_healthy') {
    return [move({ tool: [UNKNOWN_TOOL, { order_id: 'A-17' }] }), move({ tool: ['lookup_order', { order_id: 'A-17' }] }),
            final];
  }
  throw new Error(`unknown scenario ${scenario}; choose from ${MODEL_SCENARIOS.join(', ')}`);
}

/** The model's move after `responses` model responses (the answer once the script is played). */
export function modelMove(scenario, responses) {
  const moves = modelScript(scenario);
  return moves[Math.min(responses, moves.length - 1)];
}

/** The scenario (first argument) and the flags after it. */
export function scenarioFromArgv(argv = process.argv.slice(2)) {
  if (!argv.length || !ALL_SCENARIOS.includes(argv[0])) {
    console.error(`usage: node agent.mjs {${ALL_SCENARIOS.join(',')}} [options]`);
    process.exit(2);
  }
  return { scenario: argv[0], flags: argv.slice(1) };
}

/** `--name value` from the flags, else `fallback`. */
export function flag(flags, name, fallback) {
  const i = flags.indexOf(`--${name}`);
  return i >= 0 && i + 1 < flags.length ? flags[i + 1] : fallback;
}

/** A model call id, as a provider would give one (new every call). */
let calls = 0;
export function callId() {
  calls += 1;
  return `call_${calls}_${Math.random().toString(36).slice(2, 8)}`;
}
