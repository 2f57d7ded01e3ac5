import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { StoreProblem } from './verify.js';

/**
 * The second half of `verifyStore`'s child process (verify-child.ts), after the walk of the
 * records (verify-walk.ts): the paths a reader and a writer of data.mdb take, exercised in a
 * throwaway copy so that damage which kills them kills this child instead. The walk reads the
 * records through the log's own databases; it cannot see a page that only another database
 * uses (the inbox, the leases, the journal state), the free-page list, or a page header that only
 * a write trips over (LMDB trusts a page's txnid to tell whether it may change the page in
 * place: a flipped high bit there makes the next writer that touches the page write into the
 * read-only map, SIGSEGV). In order:
 *
 * 1. a consistent copy of data.mdb (LMDB's own copy, of one snapshot) into a temp dir;
 * 2. every named database of the copy (whatever the main database lists) read with a cursor
 *    from its first key to its last, every value read whole (overflow pages included);
 * 3. a compacting copy of that copy, which walks every page of every tree and reads every entry
 *    of the free-page list;
 * 4. in batches of write transactions, every entry of every database deleted and written again:
 *    every leaf, branch and overflow page is touched as a writer touches it, pages freed and
 *    allocated again from the free-page list, the list itself rewritten at each commit.
 *
 * `progress` is told each step before it starts, so that the parent can name the step a death
 * interrupted. The original data.mdb is only read (the copy of step 1). `scratch` is an empty
 * directory the caller made and removes (the parent process: this one may die); it needs room
 * for two copies of data.mdb. A failure of the temp dir (full, unwritable) means the check could
 * not run (`where: 'verify'`); any other failure after the copy is damage (`where: 'data.mdb'`).
 */
export interface ExerciseProgress {
  (step: string): void;
}

/** How many entries, and how many bytes of values, one write transaction of step 4 deletes and writes again. */
const BATCH_ENTRIES = 2000;
const BATCH_BYTES = 8 * 1024 * 1024;

const message = (e: unknown) => (e instanceof Error ? e.message.split('\n')[0]! : String(e));

export async function exerciseCopy(path: string, scratch: string, progress: ExerciseProgress): Promise<StoreProblem[]> {
  let step = 'copying data.mdb';
  try {
    progress(step);
    const source = open({ path, maxDbs: 1, readOnly: true, noSubdir: false });
    try {
      await source.backup(scratch, false);
    } finally {
      await source.close();
    }
    const env = open({ path: scratch, maxDbs: 1024, noSync: true, noSubdir: false, keyEncoding: 'binary', encoding: 'binary' });
    try {
      const dbs = new Map<string, Database<Buffer, Buffer>>();
      progress((step = 'reading the list of databases'));
      for (const key of env.getKeys()) {
        const name = Buffer.from(key as Buffer)
          .toString('utf8')
          .replace(/\0$/, '');
        dbs.set(name, env.openDB<Buffer, Buffer>({ name, encoding: 'binary', keyEncoding: 'binary' }));
      }
      for (const [name, db] of dbs) {
        progress((step = `reading every entry of database ${name}`));
        for (const { value } of db.getRange()) void value.length;
      }
      progress((step = 'walking every page and the free-page list (a compacting copy)'));
      const compact = join(scratch, 'compact');
      mkdirSync(compact);
      await env.backup(compact, true);
      rmSync(compact, { recursive: true, force: true });
      for (const [name, db] of dbs) {
        progress((step = `deleting and writing again every entry of database ${name}`));
        rewrite(env, db);
      }
    } finally {
      await env.close();
    }
    return [];
  } catch (e) {
    const text = message(e);
    if (step === 'copying data.mdb' || ENVIRONMENT.test(text)) {
      return [
        {
          where: 'verify',
          reason: `could not check the paths of readers and writers in a copy of data.mdb in ${scratch} (while ${step}): ${text}`,
        },
      ];
    }
    return [{ where: 'data.mdb', reason: `LMDB failed while ${step} in a throwaway copy of data.mdb (its pages are damaged): ${text}` }];
  }
}

/**
 * Failures of the temp dir rather than of data.mdb's pages (the copy is of one consistent
 * snapshot, and nothing else uses it): anything else a step of the copy throws is damage — a
 * damaged page number, for one, sends a write past any sane file size (`EFBIG`).
 */
const ENVIRONMENT = new RegExp(
  [
    'No space left|ENOSPC|quota|EDQUOT',
    'Read-only file system|EROFS|Permission denied|EACCES|EPERM',
    'Too many open files|EMFILE|Cannot allocate memory|ENOMEM|Input/output error|EIO\\b',
  ].join('|'),
  'i',
);

/** Every entry of `db` deleted and written again, in write transactions of one batch each. */
function rewrite(env: RootDatabase, db: Database<Buffer, Buffer>): void {
  let after: Buffer | undefined;
  for (;;) {
    const batch: [Buffer, Buffer][] = [];
    let bytes = 0;
    for (const { key, value } of db.getRange(after === undefined ? {} : { start: after })) {
      if (after !== undefined && key.equals(after)) continue;
      batch.push([Buffer.from(key), Buffer.from(value)]);
      bytes += value.length;
      if (batch.length >= BATCH_ENTRIES || bytes >= BATCH_BYTES) break;
    }
    if (batch.length === 0) return;
    env.transactionSync(() => {
      for (const [key] of batch) db.removeSync(key);
      for (const [key, value] of batch) db.putSync(key, value);
    });
    after = batch[batch.length - 1]![0];
    env.resetReadTxn(); // no snapshot older than this commit: its freed pages are free for the next
  }
}
