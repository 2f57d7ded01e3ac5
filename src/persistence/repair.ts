import { renameSync } from 'node:fs';
import { join } from 'node:path';
import { currentBootId, openDbs, rebuild, withLock, writeDurably } from './journal-recovery.js';
import { Journal } from './journal.js';
import { lmdbStore } from './lmdb-store.js';

/**
 * The two repairs of `repairStore` (verify.ts), each returning what it did in words. Both run
 * under the recovery lock that opening the store takes, and expect no other process to have
 * the store open.
 */

/** data.mdb damaged or missing, the journal whole: data.mdb moved aside and rebuilt from the journal. */
export function rebuildData(path: string): string[] {
  const actions: string[] = [];
  const journal = new Journal(join(path, 'journal'));
  withLock(path, () => {
    const kept = rebuild(path, journal, true);
    if (kept) actions.push(`moved the damaged data.mdb aside to ${kept}`);
    actions.push('rebuilt data.mdb from the journal');
    writeDurably(join(journal.dir, 'BOOT'), currentBootId());
  });
  return actions;
}

/**
 * The journal damaged, data.mdb whole: the journal is moved aside and written again from
 * data.mdb, as for a store that never had one (the migration of docs/event-log.md).
 */
export async function rejournal(path: string): Promise<string[]> {
  const kept = moveAside(join(path, 'journal'));
  const dbs = openDbs(path);
  try {
    dbs.env.transactionSync(() => {
      dbs.journal.removeSync('state');
      dbs.journal.removeSync('migration');
    });
  } finally {
    await dbs.env.close();
  }
  await lmdbStore({ path }).close(); // adopts data.mdb into a new journal
  return [`moved the damaged journal aside to ${kept}`, 'wrote a new journal from data.mdb'];
}

/** Every surface chunk removed (a cache of the records: the next opens write them again). */
export async function dropSurfaceChunks(path: string): Promise<string[]> {
  const dbs = openDbs(path);
  try {
    await dbs.surface!.clearAsync();
  } finally {
    await dbs.env.close();
  }
  return ['dropped the surface chunks (a cache of the records; opens write them again)'];
}

/** Moves `file` aside as `<file>.damaged-<time>`; returns the new name. */
export function moveAside(file: string): string {
  const to = `${file}.damaged-${new Date().toISOString().replace(/[:.]/g, '-')}`;
  renameSync(file, to);
  return to;
}
