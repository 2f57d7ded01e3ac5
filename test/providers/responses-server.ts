import { startSseServer, type Reply, type ScriptedServer, type SseEvent } from './sse-server.js';

/**
 * A local server speaking the Responses API streaming wire format, as `openai`'s
 * `Stream.fromSSEResponse` parses it: named events (`event: response.created` …) whose data is
 * the JSON event with the same `type` and a `sequence_number`; no `[DONE]`. The stream opens with
 * `response.created`, streams output items (`response.output_item.added`, deltas,
 * `response.output_item.done`) and ends with `response.completed` (or `.incomplete` / `.failed`)
 * carrying the whole response (its `output` and `usage`). An `error` event carries
 * `{ type: 'error', code, message, param }`. HTTP errors are JSON bodies `{ error: { message, type, code } }`.
 * @example
 * const server = await startResponsesServer(); server.reply(rs.textReply(['Hel', 'lo']))
 */
export async function startResponsesServer(): Promise<ScriptedServer> {
  return startSseServer('/v1');
}

type Ev = { type: string; [k: string]: unknown };
type Item = Record<string, unknown>;

const response = (status: string, output: Item[], extra: Record<string, unknown> = {}) => ({
  id: 'resp_test1',
  object: 'response',
  created_at: 1_700_000_000,
  status,
  model: 'gpt-test',
  output,
  error: null,
  incomplete_details: null,
  usage: null,
  ...extra,
});

/** Builders for Responses stream events, output items and whole replies. */
export const rs = {
  created: (): Ev => ({ type: 'response.created', response: response('in_progress', []) }),
  inProgress: (): Ev => ({ type: 'response.in_progress', response: response('in_progress', []) }),
  /** A reasoning item with its encrypted content (as `include: ['reasoning.encrypted_content']` returns it). */
  reasoning: (id: string, encrypted: string, summary: string[] = []): Item => ({
    id,
    type: 'reasoning',
    summary: summary.map((text) => ({ type: 'summary_text', text })),
    encrypted_content: encrypted,
  }),
  message: (id: string, text: string): Item => ({
    id,
    type: 'message',
    role: 'assistant',
    status: 'completed',
    content: [{ type: 'output_text', text, annotations: [] }],
  }),
  call: (id: string, callId: string, name: string, args: string): Item => ({
    id,
    type: 'function_call',
    status: 'completed',
    call_id: callId,
    name,
    arguments: args,
  }),
  added: (index: number, item: Item): Ev => ({ type: 'response.output_item.added', output_index: index, item }),
  done: (index: number, item: Item): Ev => ({ type: 'response.output_item.done', output_index: index, item }),
  summary: (index: number, itemId: string, delta: string): Ev => ({
    type: 'response.reasoning_summary_text.delta',
    item_id: itemId,
    output_index: index,
    summary_index: 0,
    delta,
  }),
  text: (index: number, itemId: string, delta: string): Ev => ({
    type: 'response.output_text.delta',
    item_id: itemId,
    output_index: index,
    content_index: 0,
    delta,
    logprobs: [],
  }),
  refusal: (index: number, itemId: string, delta: string): Ev => ({
    type: 'response.refusal.delta',
    item_id: itemId,
    output_index: index,
    content_index: 0,
    delta,
  }),
  args: (index: number, itemId: string, delta: string): Ev => ({
    type: 'response.function_call_arguments.delta',
    item_id: itemId,
    output_index: index,
    delta,
  }),
  argsDone: (index: number, itemId: string, args: string): Ev => ({
    type: 'response.function_call_arguments.done',
    item_id: itemId,
    output_index: index,
    arguments: args,
  }),
  usage: (input: number, output: number, cached = 0, reasoning = 0) => ({
    input_tokens: input,
    input_tokens_details: { cached_tokens: cached },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: reasoning },
    total_tokens: input + output,
  }),
  completed: (output: Item[], usage: unknown = rs.usage(12, 5)): Ev => ({
    type: 'response.completed',
    response: response('completed', output, { usage }),
  }),
  incomplete: (reason: string, output: Item[], usage: unknown = rs.usage(12, 5)): Ev => ({
    type: 'response.incomplete',
    response: response('incomplete', output, { usage, incomplete_details: { reason } }),
  }),
  failed: (code: string, message: string): Ev => ({
    type: 'response.failed',
    response: response('failed', [], { error: { code, message } }),
  }),
  error: (code: string, message: string): Ev => ({ type: 'error', code, message, param: null }),
  /** A streamed 200 reply: each event named after its `type`, numbered in order. */
  stream: (events: Ev[], opts: { delayMs?: number; cutAfter?: number; headersDelayMs?: number } = {}): Reply => ({
    kind: 'sse',
    events: events.map((e, i): SseEvent => ({ event: e.type, data: JSON.stringify({ ...e, sequence_number: i }) })),
    ...opts,
  }),
  /** One message item streamed in several text deltas, then `response.completed`. */
  textReply: (parts: string[], usage: unknown = rs.usage(12, 5)): Reply => {
    const msg = rs.message('msg_1', parts.join(''));
    return rs.stream([
      rs.created(),
      rs.inProgress(),
      rs.added(0, { ...msg, status: 'in_progress', content: [] }),
      ...parts.map((p) => rs.text(0, 'msg_1', p)),
      rs.done(0, msg),
      rs.completed([msg], usage),
    ]);
  },
  /** A reasoning item (summary streamed), then one function call whose arguments stream in two deltas. */
  reasoningCallReply: (r: Item, call: Item, usage: unknown = rs.usage(40, 30, 0, 20)): Reply => {
    const args = String(call.arguments);
    const cut = Math.floor(args.length / 2);
    const summary = (r.summary as { text: string }[]).map((s) => s.text);
    return rs.stream([
      rs.created(),
      rs.added(0, { ...r, summary: [], encrypted_content: null }),
      ...summary.map((s) => rs.summary(0, String(r.id), s)),
      rs.done(0, r),
      rs.added(1, { ...call, status: 'in_progress', arguments: '' }),
      rs.args(1, String(call.id), args.slice(0, cut)),
      rs.args(1, String(call.id), args.slice(cut)),
      rs.argsDone(1, String(call.id), args),
      rs.done(1, call),
      rs.completed([r, call], usage),
    ]);
  },
  /** An HTTP error with OpenAI's error body. */
  httpError: (status: number, message: string, type: string, headers?: Record<string, string>): Reply => ({
    kind: 'status',
    status,
    body: { error: { message, type, param: null, code: null } },
    ...(headers ? { headers } : {}),
  }),
};
