import { expect, it } from 'vitest';
import { isCorruptLogError, isValidationError } from '../../src/contracts/errors.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { sha256Of } from '../../src/persistence/blob-store.js';
import { resolveMessages, storeMessages, DEFAULT_CONTENT_LIMITS } from '../../src/persistence/content-parts.js';
import type { Message } from '../../src/contracts/message.js';
import { collect } from '../helpers/drafts.js';

/** What a backend's wiring gives the blob contract: how many blobs it holds, and damage done behind its back. */
export interface BlobHooks {
  count(): Promise<number>;
  /** Removes the blob, or changes one of its bytes, without going through the store's API. */
  damage(sha256: string, how: 'remove' | 'flip'): Promise<void>;
}

const png = (seed: number) => Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47]), Buffer.alloc(4096, seed)]);

/** An image message stored through the store's blobs, appended to `sessionId`'s log. */
async function logImage(store: EventStore, sessionId: string, bytes: Uint8Array): Promise<Message> {
  const [message] = await storeMessages(
    [
      {
        role: 'user' as const,
        content: [
          { type: 'text' as const, text: 'look' },
          { type: 'image' as const, data: bytes, mediaType: 'image/png' },
        ],
      },
    ],
    store.blobs,
    DEFAULT_CONTENT_LIMITS,
    'test',
  );
  const { writerEpoch, lastSeq } = await store.attachWriter(sessionId);
  await store.append(sessionId, writerEpoch, lastSeq + 1, [
    { type: 'user/message', turn: 1, step: 1, attempt: 1, surfaceOp: 'append', payload: { message: message! } },
  ]);
  return message as Message;
}

/** The contract of `store.blobs` (blob-store.ts), run by eventStoreContract for every built-in store. */
export function blobStoreContract(
  get: () => { store: EventStore; reopen?: () => Promise<EventStore>; blobs: BlobHooks; setStore(s: EventStore): void },
) {
  it('stores a blob once: two sessions logging the same image reference one blob, named by its SHA-256', async () => {
    const { store, blobs } = get();
    const bytes = png(1);
    const a = await logImage(store, 'sa', bytes);
    const b = await logImage(store, 'sb', Uint8Array.from(bytes));
    const ref = { sha256: sha256Of(bytes), size: bytes.length };
    expect((a.content as { blob?: unknown }[])[1]!.blob).toEqual(ref);
    expect((b.content as { blob?: unknown }[])[1]!.blob).toEqual(ref);
    expect(await blobs.count()).toBe(1);
    // the log holds the reference, never the bytes
    const [record] = await collect(store.readEvents('sa'));
    expect(JSON.stringify(record!.payload)).not.toContain(bytes.toString('base64').slice(0, 40));
    expect(Buffer.from((await store.blobs!.get(ref.sha256))!)).toEqual(bytes);
    expect(await store.blobs!.has(sha256Of(png(2)))).toBe(false);
    expect(await store.blobs!.get(sha256Of(png(2)))).toBeUndefined();
  });

  it('reads a blob back after the store is reopened, and resolves the logged message to the same bytes as base64', async () => {
    const { store, reopen, setStore } = get();
    if (!reopen) return; // a memory store has nothing to reopen
    const bytes = png(3);
    const message = await logImage(store, 's', bytes);
    await store.close();
    const again = await reopen();
    setStore(again);
    const [logged] = await collect(again.readEvents('s'));
    const [resolved] = await resolveMessages([(logged!.payload as { message: Message }).message], again.blobs);
    expect(resolved!.content).toEqual([
      { type: 'text', text: 'look' },
      { type: 'image', data: bytes.toString('base64'), mediaType: 'image/png' },
    ]);
    expect((logged!.payload as { message: Message }).message).toEqual(message);
  });

  it('a damaged blob reads as a CorruptLogError naming it; a missing one fails the resolution of the message that references it, naming it', async () => {
    const { store, blobs } = get();
    const bytes = png(4);
    const message = await logImage(store, 's', bytes);
    const sha256 = sha256Of(bytes);
    await blobs.damage(sha256, 'flip');
    const damaged = await store.blobs!.get(sha256).catch((e: unknown) => e);
    expect(isCorruptLogError(damaged) && damaged.reason).toContain(`blob ${sha256} is damaged`);
    await blobs.damage(sha256, 'remove');
    const missing = await resolveMessages([message], store.blobs).catch((e: unknown) => e);
    expect(isCorruptLogError(missing) && missing.reason).toContain(`blob ${sha256} is missing`);
    // a message that references a blob the store lacks is refused before anything is logged
    const refused = await storeMessages([message], store.blobs, DEFAULT_CONTENT_LIMITS, 'test').catch((e: unknown) => e);
    expect(isValidationError(refused) && refused.message).toContain(`blob ${sha256} is not in this store`);
  });
}
