import { describe, expect, it } from 'vitest';
import { lmdbStore, repairStore, verifyStore } from '../../src/index.js';
import { sha256Of } from '../../src/persistence/blob-store.js';
import { DEFAULT_CONTENT_LIMITS, resolveMessages, storeMessages } from '../../src/persistence/content-parts.js';
import type { Message } from '../../src/contracts/message.js';
import { collect } from '../helpers/drafts.js';
import { openDbs } from '../../src/persistence/journal-recovery.js';
import { tempDirs } from '../helpers/temp-dirs.js';

/**
 * `verifyStore` checks every blob of an LMDB store against its name and every blob a record
 * references against the stored ones; the journal holds every blob written, so `repairStore`
 * rebuilds a data.mdb whose blob is missing or damaged with the blob as it was written.
 */
const dir = tempDirs('actorloop-blob-verify-');

async function writeImages(path: string, images: Buffer[]): Promise<void> {
  const store = lmdbStore({ path });
  const { writerEpoch } = await store.attachWriter('s');
  for (const [i, data] of images.entries()) {
    const [message] = await storeMessages(
      [{ role: 'user' as const, content: [{ type: 'image' as const, data, mediaType: 'image/png' }] }],
      store.blobs,
      DEFAULT_CONTENT_LIMITS,
      'test',
    );
    await store.append('s', writerEpoch, i + 1, [
      { type: 'user/message', turn: 1, step: 1, attempt: 1, surfaceOp: 'append', payload: { message: message! } },
    ]);
  }
  await store.close();
}

describe('verifyStore and repairStore: blobs', () => {
  it('names a damaged blob and a missing one (with the record referencing it); repair restores both from the journal', async () => {
    const path = dir();
    const [a, b] = [Buffer.alloc(3000, 1), Buffer.alloc(5000, 2)];
    await writeImages(path, [a, b]);
    expect(await verifyStore(path)).toMatchObject({ ok: true });
    // behind the store's back: LMDB writes that no journal frame records
    const dbs = openDbs(path);
    const flipped = Buffer.from(a);
    flipped[10]! ^= 4;
    dbs.env.transactionSync(() => {
      dbs.blobs!.putSync(sha256Of(a), flipped);
      dbs.blobs!.removeSync(sha256Of(b));
    });
    await dbs.env.close();
    const report = await verifyStore(path);
    expect(report.ok).toBe(false);
    expect(!report.ok && report.problems).toEqual(
      expect.arrayContaining([
        { where: 'data.mdb', reason: expect.stringContaining(`blob ${sha256Of(a)} is damaged`) },
        { where: 'data.mdb', sessionId: 's', seq: 2, reason: `blob ${sha256Of(b)} is missing (this record references it)` },
      ]),
    );
    const repaired = await repairStore(path);
    expect(repaired).toMatchObject({ repaired: true, after: { ok: true } });
    const store = lmdbStore({ path });
    try {
      expect(Buffer.from((await store.blobs.get(sha256Of(a)))!)).toEqual(a);
      expect(Buffer.from((await store.blobs.get(sha256Of(b)))!)).toEqual(b);
    } finally {
      await store.close();
    }
  });

  it('a store written before blobs (no blobs database) verifies sound, and its text messages read and resolve unchanged', async () => {
    const path = dir();
    const old = { role: 'user', content: 'plain text, as every log before content parts' };
    const store = lmdbStore({ path });
    const { writerEpoch } = await store.attachWriter('s');
    await store.append('s', writerEpoch, 1, [
      { type: 'user/message', turn: 1, step: 1, attempt: 1, surfaceOp: 'append', payload: { message: old } },
    ]);
    await store.close();
    const dbs = openDbs(path);
    await dbs.blobs!.drop();
    await dbs.env.close();
    expect(await verifyStore(path)).toMatchObject({ ok: true, checked: { events: 1 } });
    const again = lmdbStore({ path });
    try {
      const [record] = await collect(again.readEvents('s'));
      const messages = [(record!.payload as { message: Message }).message];
      expect(messages).toEqual([old]);
      expect(await resolveMessages(messages, again.blobs)).toBe(messages);
    } finally {
      await again.close();
    }
  });
});
