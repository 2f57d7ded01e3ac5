import { startSseServer, type Reply, type ScriptedServer, type SseEvent } from './sse-server.js';

/**
 * A local server speaking the Chat Completions streaming wire format, as `openai`'s
 * `Stream.fromSSEResponse` parses it: `data: <ChatCompletionChunk JSON>` events without event
 * names, ended by `data: [DONE]`; with `stream_options.include_usage` the last chunk before
 * `[DONE]` has `choices: []` and `usage`. Errors are JSON bodies `{ error: { message, type, code } }`.
 * @example
 * const server = await startOpenAIServer(); server.reply(oa.stream([oa.delta({ content: 'hi' }), oa.finish('stop')]))
 */
export async function startOpenAIServer(): Promise<ScriptedServer> {
  return startSseServer('/v1');
}

type Delta = Record<string, unknown>;
interface Chunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  system_fingerprint: string;
  choices: { index: number; delta: Delta; logprobs: null; finish_reason: string | null }[];
  usage?: unknown;
}

const base = (choices: Chunk['choices'], usage?: unknown): Chunk => ({
  id: 'chatcmpl-test1',
  object: 'chat.completion.chunk',
  created: 1_700_000_000,
  model: 'gpt-test',
  system_fingerprint: 'fp_test',
  choices,
  ...(usage === undefined ? {} : { usage }),
});

/** Builders for chat.completion.chunk objects and whole replies. */
export const oa = {
  /** The opening chunk: `{ role: 'assistant', content: '', refusal: null }`. */
  role: (): Chunk => base([{ index: 0, delta: { role: 'assistant', content: '', refusal: null }, logprobs: null, finish_reason: null }]),
  delta: (delta: Delta): Chunk => base([{ index: 0, delta, logprobs: null, finish_reason: null }]),
  text: (content: string): Chunk => oa.delta({ content }),
  /** A partial tool call: `id`, `type` and `function.name` only on its first chunk. */
  tool: (index: number, args: string, first?: { id: string; name: string }): Chunk =>
    oa.delta({
      tool_calls: [
        first
          ? { index, id: first.id, type: 'function', function: { name: first.name, arguments: args } }
          : { index, function: { arguments: args } },
      ],
    }),
  finish: (reason: string): Chunk => base([{ index: 0, delta: {}, logprobs: null, finish_reason: reason }]),
  /** The include_usage chunk: no choices, usage only. */
  usage: (prompt: number, completion: number, cached?: number, reasoning?: number): Chunk =>
    base([], {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      prompt_tokens_details: { cached_tokens: cached ?? 0, audio_tokens: 0 },
      completion_tokens_details: {
        reasoning_tokens: reasoning ?? 0,
        audio_tokens: 0,
        accepted_prediction_tokens: 0,
        rejected_prediction_tokens: 0,
      },
    }),
  /** A streamed 200 reply: the chunks, then `[DONE]` unless `done: false`. */
  stream: (chunks: unknown[], opts: { done?: boolean; delayMs?: number; cutAfter?: number; headersDelayMs?: number } = {}): Reply => {
    const events: SseEvent[] = chunks.map((c) => ({ data: JSON.stringify(c) }));
    if (opts.done !== false) events.push({ data: '[DONE]' });
    const { done: _done, ...rest } = opts;
    return { kind: 'sse', events, ...rest };
  },
  /** Text in several deltas, a finish reason and a usage chunk. */
  textReply: (parts: string[], finish = 'stop', usage: [number, number, number?, number?] = [12, 5, 0]): Reply =>
    oa.stream([oa.role(), ...parts.map(oa.text), oa.finish(finish), oa.usage(...usage)]),
  /** An HTTP error with OpenAI's error body. */
  error: (status: number, message: string, type: string, headers?: Record<string, string>): Reply => ({
    kind: 'status',
    status,
    body: { error: { message, type, param: null, code: null } },
    ...(headers ? { headers } : {}),
  }),
};

/** OpenAI's 429 body when the account has no credit left (https://platform.openai.com/docs/guides/error-codes). */
export const quotaExceeded = () => ({
  kind: 'status' as const,
  status: 429,
  body: {
    error: {
      message: 'You exceeded your current quota, please check your plan and billing details.',
      type: 'insufficient_quota',
      param: null,
      code: 'insufficient_quota',
    },
  },
});
