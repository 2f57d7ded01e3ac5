import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema, type UIMessage } from 'ai';
import type { EventDraft } from '../../src/index.js';
import { SseParser } from '../../src/web/sse-parse.js';
import type { UIChunk } from '../../src/web/ui-protocol.js';

/** A log record to append by hand (a session's writer would stage it). */
export const draft = (type: string, payload: Record<string, unknown>, step = 0): EventDraft => ({
  type: type as EventDraft['type'],
  turn: 1,
  step,
  attempt: 1,
  surfaceOp: type === 'user/message' || type === 'assistant/message' || type === 'tool/result' ? 'append' : 'none',
  payload,
});

/** Builds the message a UI message stream makes, with the AI SDK's own client code. */
export async function drain(stream: ReadableStream<never> | ReadableStream<unknown>, message?: UIMessage): Promise<UIMessage> {
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream: stream as never, ...(message ? { message } : {}), terminateOnError: true })) last = m;
  return last!;
}

export const plain = (v: unknown) => JSON.parse(JSON.stringify(v)) as unknown;

export const chatPost = (body: unknown) =>
  new Request('http://app/api/chat', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

/** The `data:` chunks of a UI message stream, with the `id:` each carried. */
export async function chunksOf(res: Response): Promise<{ chunk: UIChunk | '[DONE]'; id?: string }[]> {
  return chunksOfText(await res.text());
}

export function chunksOfText(text: string): { chunk: UIChunk | '[DONE]'; id?: string }[] {
  const out: { chunk: UIChunk | '[DONE]'; id?: string }[] = [];
  for (const m of new SseParser().push(text))
    out.push({ chunk: m.data === '[DONE]' ? '[DONE]' : (JSON.parse(m.data) as UIChunk), ...(m.id ? { id: m.id } : {}) });
  return out;
}

/** A UI message stream's body as its chunks, parsed and checked by the AI SDK's own parser and schema. */
export function uiChunks(body: ReadableStream<Uint8Array>): ReadableStream<unknown> {
  return parseJsonEventStream({ stream: body, schema: uiMessageChunkSchema }).pipeThrough(
    new TransformStream({
      transform(c, controller) {
        if (!c.success) throw c.error;
        controller.enqueue(c.value);
      },
    }),
  );
}
