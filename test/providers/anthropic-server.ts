import { startSseServer, type Reply, type ScriptedServer, type SseEvent } from './sse-server.js';

/**
 * A local server speaking the Messages streaming wire format, as `@anthropic-ai/sdk`'s
 * `Stream.fromSSEResponse` parses it: named events (`event: message_start` …) whose data is the
 * JSON event with the same `type`; `ping` events are skipped by the SDK; `event: error` carries
 * `{ type: 'error', error: { type, message } }` and is thrown as an `APIError` without status.
 * HTTP errors are JSON bodies `{ type: 'error', error: { type, message }, request_id }`.
 * @example
 * const server = await startAnthropicServer(); server.reply(an.textReply(['Hel', 'lo']))
 */
export async function startAnthropicServer(): Promise<ScriptedServer> {
  return startSseServer('');
}

type Ev = { type: string; [k: string]: unknown };

/** Builders for raw message stream events and whole replies. */
export const an = {
  start: (usage: { input?: number; cacheRead?: number; cacheWrite?: number } = {}): Ev => ({
    type: 'message_start',
    message: {
      id: 'msg_test1',
      type: 'message',
      role: 'assistant',
      model: 'claude-test',
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: {
        input_tokens: usage.input ?? 20,
        output_tokens: 1,
        cache_creation_input_tokens: usage.cacheWrite ?? 0,
        cache_read_input_tokens: usage.cacheRead ?? 0,
      },
    },
  }),
  ping: (): Ev => ({ type: 'ping' }),
  blockStart: (index: number, block: Record<string, unknown>): Ev => ({ type: 'content_block_start', index, content_block: block }),
  textStart: (index: number): Ev => an.blockStart(index, { type: 'text', text: '' }),
  thinkingStart: (index: number): Ev => an.blockStart(index, { type: 'thinking', thinking: '', signature: '' }),
  toolStart: (index: number, id: string, name: string): Ev => an.blockStart(index, { type: 'tool_use', id, name, input: {} }),
  delta: (index: number, delta: Record<string, unknown>): Ev => ({ type: 'content_block_delta', index, delta }),
  text: (index: number, text: string): Ev => an.delta(index, { type: 'text_delta', text }),
  thinking: (index: number, thinking: string): Ev => an.delta(index, { type: 'thinking_delta', thinking }),
  signature: (index: number, signature: string): Ev => an.delta(index, { type: 'signature_delta', signature }),
  json: (index: number, partial_json: string): Ev => an.delta(index, { type: 'input_json_delta', partial_json }),
  blockStop: (index: number): Ev => ({ type: 'content_block_stop', index }),
  messageDelta: (stop_reason: string | null, output = 15, extra: Record<string, unknown> = {}): Ev => ({
    type: 'message_delta',
    delta: { stop_reason, stop_sequence: null, ...extra },
    usage: { output_tokens: output },
  }),
  stop: (): Ev => ({ type: 'message_stop' }),
  /** `event: error` in the stream, as the API sends it when it fails mid-way (e.g. overloaded). */
  streamError: (type: string, message: string): Ev => ({ type: 'error', error: { type, message } }),
  /** A streamed 200 reply: each event named after its `type`. */
  stream: (events: Ev[], opts: { delayMs?: number; cutAfter?: number; headersDelayMs?: number } = {}): Reply => ({
    kind: 'sse',
    events: events.map((e): SseEvent => ({ event: e.type, data: JSON.stringify(e) })),
    ...opts,
  }),
  /** One text block in several deltas, then `stop_reason`. */
  textReply: (parts: string[], stopReason = 'end_turn', extra: Record<string, unknown> = {}): Reply =>
    an.stream([
      an.start(),
      an.textStart(0),
      an.ping(),
      ...parts.map((p) => an.text(0, p)),
      an.blockStop(0),
      an.messageDelta(stopReason, 15, extra),
      an.stop(),
    ]),
  /** An HTTP error with Anthropic's error body. */
  error: (status: number, type: string, message: string, headers?: Record<string, string>): Reply => ({
    kind: 'status',
    status,
    body: { type: 'error', error: { type, message }, request_id: 'req_test' },
    ...(headers ? { headers } : {}),
  }),
};
