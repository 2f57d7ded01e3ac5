import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, isValidationError, memoryStore, scriptedModel, type EventStore } from '../../src/index.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { sha256Of, type MemoryBlobs } from '../../src/persistence/blob-store.js';
import { ids, logOf, memRuntime } from '../helpers/runtime.js';

/**
 * Content parts through the runtime (docs/providers.md, "Content parts"): bytes from a prompt, an
 * input or a tool are stored as blobs before anything is logged, the log references them, the
 * model receives them resolved; the size limits refuse with a ValidationError before anything is
 * stored or logged; a store without blobs keeps taking text.
 */
const image = (n: number, seed = 1) => Buffer.alloc(n, seed);
const withImage = (bytes: Uint8Array, text = 'see') => ({
  role: 'user' as const,
  content: [
    { type: 'text' as const, text },
    { type: 'image' as const, data: bytes, mediaType: 'image/png' },
  ],
});
const payloadsOf = (log: EventRecord[], type: string) => log.filter((e) => e.type === type).map((e) => JSON.stringify(e.payload));

describe('content parts in runs', () => {
  it('a prompt and a follow-up input with images: the log keeps blob references, the model receives the bytes', async () => {
    const model = scriptedModel(['one', 'two']);
    const { runtime, store } = memRuntime({ model });
    const s = await runtime.openSession('s');
    const bytes = image(2000, 3);
    await s.execute({ kind: 'prompt', ...ids(), message: withImage(bytes) });
    await s.submitInput({ inputId: 'i1', mode: 'follow_up', message: withImage(bytes, 'again') });
    await s.waitForIdle();
    const log = await logOf(store, 's');
    const ref = `"blob":{"sha256":"${sha256Of(bytes)}","size":2000}`;
    expect(payloadsOf(log, 'user/message')[0]).toContain(ref);
    expect(payloadsOf(log, 'input/accepted')[0]).toContain(ref);
    expect(log.some((e) => JSON.stringify(e.payload).includes(bytes.toString('base64').slice(0, 64)))).toBe(false);
    const last = model.requests[1]!.messages;
    const sent = last.filter((m) => m.role === 'user').map((m) => m.content);
    expect(sent).toEqual([
      [
        { type: 'text', text: 'see' },
        { type: 'image', data: bytes.toString('base64'), mediaType: 'image/png' },
      ],
      [
        { type: 'text', text: 'again' },
        { type: 'image', data: bytes.toString('base64'), mediaType: 'image/png' },
      ],
    ]);
  });

  it("runtime.submit stores an input's image before the inbox records it: the entry holds the reference", async () => {
    const { runtime, store } = memRuntime({ model: scriptedModel(['x']) });
    const bytes = image(1500, 5);
    const receipt = await runtime.submit('s', { kind: 'input', inputId: 'i1', mode: 'follow_up', message: withImage(bytes) });
    expect(receipt.status).toBe('accepted');
    const [entry] = await store.work!.pending('s');
    expect(entry!.entry).toMatchObject({
      message: [{ content: [{ type: 'text' }, { type: 'image', blob: { sha256: sha256Of(bytes), size: 1500 }, mediaType: 'image/png' }] }],
    });
  });

  it('a blob over maxBlobBytes or a message over maxMessageBytes is a ValidationError naming the limit; nothing is logged or stored', async () => {
    const store = memoryStore();
    const { runtime } = memRuntime({ model: scriptedModel(['x']), contentLimits: { maxBlobBytes: 1000, maxMessageBytes: 1500 } }, store);
    const s = await runtime.openSession('s');
    const blob = await s.execute({ kind: 'prompt', ...ids(), message: withImage(image(1001)) }).catch((e: unknown) => e);
    expect(isValidationError(blob) && blob.message).toContain('over the limit of 1000 bytes per blob (contentLimits.maxBlobBytes)');
    const two = { role: 'user' as const, content: [...withImage(image(800, 1)).content, ...withImage(image(800, 2)).content] };
    const message = await s.submitInput({ inputId: 'i1', mode: 'steer', message: two }).catch((e: unknown) => e);
    expect(isValidationError(message) && message.message).toContain('contentLimits.maxMessageBytes');
    expect((store.blobs as MemoryBlobs).bytes.size).toBe(0);
    expect((await logOf(store, 's')).map((e) => e.type)).toEqual(['session/attached']);
  });

  it("a tool's image is stored as a blob; one over the limit becomes an error result the model reads", async () => {
    const bytes = image(500, 4);
    let size = 500;
    const shot = defineTool({
      name: 'shot',
      description: 'a screenshot',
      parameters: z.object({}),
      execute: () => ({ kind: 'completed' as const, content: [{ type: 'image' as const, data: image(size, 4), mediaType: 'image/png' }] }),
    });
    const model = scriptedModel([
      { toolCalls: [{ name: 'shot', arguments: {} }] },
      'ok',
      { toolCalls: [{ name: 'shot', arguments: {} }] },
      'ok',
    ]);
    const { runtime, store } = memRuntime({ model, tools: [shot], contentLimits: { maxBlobBytes: 1000 } });
    const s = await runtime.openSession('s');
    await s.execute({ kind: 'prompt', ...ids(), message: 'shoot' });
    expect(payloadsOf(await logOf(store, 's'), 'tool/result')[0]).toContain(`"sha256":"${sha256Of(bytes)}"`);
    expect(model.requests[1]!.messages.at(-1)!.content).toEqual([
      { type: 'image', data: bytes.toString('base64'), mediaType: 'image/png' },
    ]);
    size = 1001;
    await s.execute({ kind: 'prompt', ...ids(), message: 'again' });
    expect(model.requests[3]!.messages.at(-1)).toMatchObject({
      role: 'tool',
      isError: true,
      content: expect.stringContaining('tool shot returned content that cannot be stored'),
    });
  });

  it('a store without blobs takes text as before and refuses bytes with a ValidationError', async () => {
    const inner = memoryStore();
    const noBlobs: EventStore = new Proxy(inner, { get: (t, k) => (k === 'blobs' ? undefined : Reflect.get(t, k, t)) });
    const { runtime } = memRuntime({ model: scriptedModel(['text works']) }, noBlobs);
    const s = await runtime.openSession('s');
    expect((await s.execute({ kind: 'prompt', ...ids(), message: 'hi' })).finalMessage).toBe('text works');
    const refused = await s.execute({ kind: 'prompt', ...ids(), message: withImage(image(10)) }).catch((e: unknown) => e);
    expect(isValidationError(refused) && refused.message).toContain('this store keeps no blobs');
  });

  it('base64 data that is not canonical or holds no bytes is a ValidationError naming the part; nothing is stored or logged', async () => {
    const store = memoryStore();
    const { runtime } = memRuntime({ model: scriptedModel(['x'], { loop: true }) }, store);
    const s = await runtime.openSession('s');
    // 'A': 6 bits, no byte (the model got ""); 'AAAAA': a length not a multiple of 4 (cut to 'AAAA');
    // 'ABC=' and 'AB==': padding bits set (read back as 'ABA=', 'AA=='); '': no bytes; unpadded 'AAAAAA'
    for (const data of ['A', 'AAAAA', 'ABC=', 'AB==', '', 'AAAAAA']) {
      const message = {
        role: 'user' as const,
        content: [
          { type: 'text' as const, text: 'see' },
          { type: 'image' as const, data, mediaType: 'image/png' },
        ],
      };
      const run = await s.execute({ kind: 'prompt', ...ids(), message }).catch((e: unknown) => e);
      expect(isValidationError(run) && run.issues.map((i) => i.path), data).toEqual([[0, 'content', 1]]);
      expect(String(run), data).toContain('session.execute: message');
      const input = await s.submitInput({ inputId: 'i1', mode: 'steer', message }).catch((e: unknown) => e);
      expect(isValidationError(input), data).toBe(true);
      const submitted = await runtime.submit('s2', { kind: 'input', inputId: 'i1', mode: 'follow_up', message }).catch((e: unknown) => e);
      expect(isValidationError(submitted), data).toBe(true);
    }
    const empty = { role: 'user' as const, content: [{ type: 'file' as const, data: new Uint8Array(0), mediaType: 'application/pdf' }] };
    expect(await s.execute({ kind: 'prompt', ...ids(), message: empty }).catch((e: unknown) => isValidationError(e))).toBe(true);
    expect((store.blobs as MemoryBlobs).bytes.size).toBe(0);
    expect((await logOf(store, 's')).map((e) => e.type)).toEqual(['session/attached']);
    // canonical base64 of one, two and three bytes is taken, and reaches the model as given
    for (const data of ['AA==', 'AAE=', 'AAEC']) {
      const message = [{ type: 'image' as const, data, mediaType: 'image/png' }];
      expect((await s.execute({ kind: 'prompt', ...ids(), message: { role: 'user', content: message } })).status).toBe('succeeded');
    }
  });

  it('an inbox entry that holds base64 inline (store.work.submit) still reads as it was written', async () => {
    const store = memoryStore();
    const message = { role: 'user' as const, content: [{ type: 'image' as const, data: 'ABC=', mediaType: 'image/png' }] };
    await store.work!.submit('s', { kind: 'input', inputId: 'i1', mode: 'follow_up', message });
    const [entry] = await store.work!.pending('s');
    expect(entry!.entry).toEqual({ kind: 'input', inputId: 'i1', mode: 'follow_up', message });
  });
});
