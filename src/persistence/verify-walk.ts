import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { open } from 'lmdb';
import { isCorruptLogError, isUnknownSchemaVersionError } from '../contracts/errors.js';
import { inspectDataFile } from './data-file.js';
import { Journal, type JournalState } from './journal.js';
import { readState, type JournalOp, type LogDbs } from './journal-recovery.js';
import { storeFailure } from './lmdb-errors.js';
import { decodeFully, readHead } from './lmdb-txn.js';
import type { StoreProblem } from './verify.js';
import { chunkMismatch } from './surface-chunks.js';
import { blobRefsIn, sha256Of } from './blob-store.js';

/**
 * The walk `verifyStore` runs in a child process (verify-child.ts): every head, every record
 * (checksum, JSON, schema, key, contiguity, the head's tail), every id-index entry, every surface chunk, then every
 * journal frame and the journal's end against the one LMDB recorded. It reads LMDB's pages, so a
 * damaged B-tree page can kill the process that runs it: `progress` is told where the walk is
 * before each step that may, so the parent can name the place.
 */
export interface WalkProgress {
  (where: 'data.mdb' | 'journal', sessionId?: string, seq?: number): void;
}

export interface WalkResult {
  problems: StoreProblem[];
  checked: { sessions: number; events: number; frames: number };
  /** Whether data.mdb looked whole from outside (data-file.ts), so LMDB could map it. */
  dataSound: boolean;
}

const describe = (e: unknown) => (isCorruptLogError(e) ? e.reason : e instanceof Error ? e.message.split('\n')[0]! : String(e));

export function walkStore(path: string, progress: WalkProgress): WalkResult {
  const problems: StoreProblem[] = [];
  const checked = { sessions: 0, events: 0, frames: 0 };
  const journaled = existsSync(join(path, 'journal'));
  const journal = journaled ? new Journal(join(path, 'journal')) : undefined;
  const data = inspectDataFile(path);
  let recorded: JournalState | undefined;
  let tails = new Map<string, number>();
  let blobs: Set<string> | undefined;
  if (data.state === 'damaged') problems.push({ where: 'data.mdb', reason: data.reason });
  else if (data.state !== 'sound') {
    if (journal?.hasFrames()) problems.push({ where: 'data.mdb', reason: `data.mdb is ${data.state}, but the journal holds frames` });
  } else {
    progress('data.mdb');
    const env = open({ path, maxDbs: 12, readOnly: true, noSubdir: false });
    try {
      const dbs: LogDbs = {
        env,
        events: env.openDB({ name: 'events', encoding: 'string' }),
        heads: env.openDB({ name: 'heads', encoding: 'string' }),
        ids: env.openDB({ name: 'ids' }),
        journal: env.openDB({ name: 'journal', encoding: 'string' }),
        surface: env.openDB({ name: 'surface', encoding: 'string' }),
        blobs: env.openDB({ name: 'blobs', encoding: 'binary' }),
      };
      const refs = new Map<string, { sessionId: string; seq: number }>();
      tails = walkRecords(path, dbs, problems, checked, progress, refs);
      blobs = walkBlobs(dbs, refs, problems, progress);
      walkChunks(dbs, tails, problems, progress);
      if (journal) {
        try {
          recorded = readState(dbs, path);
        } catch (e) {
          problems.push({ where: 'data.mdb', reason: describe(e) });
        }
      }
    } catch (e) {
      problems.push({ where: 'data.mdb', reason: describe(storeFailure(e, { path })) });
    } finally {
      void env.close();
    }
  }
  if (journal) walkJournal(journal, recorded, tails, blobs, problems, checked, progress);
  return { problems, checked, dataSound: data.state === 'sound' };
}

function walkRecords(
  path: string,
  dbs: LogDbs,
  problems: StoreProblem[],
  checked: WalkResult['checked'],
  progress: WalkProgress,
  refs: Map<string, { sessionId: string; seq: number }>,
): Map<string, number> {
  const heads = new Map<string, number>();
  for (const key of dbs.heads.getKeys()) {
    const sessionId = String(key);
    progress('data.mdb', sessionId, 0);
    try {
      heads.set(sessionId, readHead(dbs.heads, sessionId, path)?.lastSeq ?? 0);
    } catch (e) {
      problems.push({ where: 'data.mdb', sessionId, seq: 0, reason: describe(e) });
    }
  }
  checked.sessions = heads.size;
  const seen = new Map<string, number>(); // session → last seq read
  let session: string | undefined;
  let expected = 1;
  const closeSession = () => {
    if (session === undefined) return;
    const head = heads.get(session);
    if (head === undefined && !problems.some((p) => p.sessionId === session && p.seq === 0)) {
      problems.push({ where: 'data.mdb', sessionId: session, reason: 'records without a head record' });
    } else if (head !== undefined && expected - 1 < head) {
      problems.push({
        where: 'data.mdb',
        sessionId: session,
        seq: expected,
        reason: `record missing (the head says the log ends at seq ${head})`,
      });
    }
    seen.set(session, expected - 1);
  };
  for (const { key, value } of dbs.events.getRange()) {
    const [sessionId, seq] = key;
    if (sessionId !== session) {
      closeSession();
      session = sessionId;
      expected = 1;
      progress('data.mdb', sessionId, seq);
    } else if (seq % 256 === 0) progress('data.mdb', sessionId, seq);
    if (seq !== expected)
      problems.push({ where: 'data.mdb', sessionId, seq: expected, reason: `record missing (next stored seq is ${seq})` });
    expected = seq + 1;
    checked.events++;
    try {
      for (const sha256 of blobRefsIn(decodeFully(sessionId, seq, value).payload))
        if (!refs.has(sha256)) refs.set(sha256, { sessionId, seq });
    } catch (e) {
      // a record a newer actorloop wrote is not damage: reported at `version` (repair refuses it)
      if (isUnknownSchemaVersionError(e)) problems.push({ where: 'version', sessionId, seq, reason: e.message });
      else problems.push({ where: 'data.mdb', sessionId, seq, reason: describe(e) });
    }
  }
  closeSession();
  for (const [sessionId, lastSeq] of heads) {
    if (lastSeq > 0 && !seen.has(sessionId))
      problems.push({
        where: 'data.mdb',
        sessionId,
        seq: 1,
        reason: `every record is missing (the head says the log ends at seq ${lastSeq})`,
      });
  }
  for (const { key, value } of dbs.ids.getRange()) {
    const [sessionId, eventId] = key;
    progress('data.mdb', sessionId, value);
    const raw = dbs.events.get([sessionId, value]);
    let found: string | undefined;
    try {
      found = raw === undefined ? undefined : decodeFully(sessionId, value, raw).eventId;
    } catch {
      continue; // reported above
    }
    if (found !== eventId)
      problems.push({
        where: 'data.mdb',
        sessionId,
        seq: value,
        reason:
          `the id index sends ${JSON.stringify(eventId)} to seq ${value}, ` +
          `which holds ${found === undefined ? 'nothing' : JSON.stringify(found)}`,
      });
  }
  return seen;
}

/**
 * Every stored blob against its name (its bytes' SHA-256), and every blob a record references
 * against the stored ones; returns the names stored. A problem names the blob (at `data.mdb`:
 * repair rebuilds the file from the journal, which holds every blob written).
 */
function walkBlobs(
  dbs: LogDbs,
  refs: Map<string, { sessionId: string; seq: number }>,
  problems: StoreProblem[],
  progress: WalkProgress,
): Set<string> {
  const stored = new Set<string>();
  progress('data.mdb', '(blobs)');
  // (a store no version with blobs has written has no blobs database: readOnly, none is made)
  for (const { key, value } of dbs.blobs?.getRange() ?? []) {
    const sha256 = String(key);
    stored.add(sha256);
    const actual = sha256Of(value);
    if (actual !== sha256)
      problems.push({ where: 'data.mdb', reason: `blob ${sha256} is damaged: its ${value.length} bytes hash to ${actual}` });
  }
  for (const [sha256, at] of refs)
    if (!stored.has(sha256))
      problems.push({
        where: 'data.mdb',
        sessionId: at.sessionId,
        seq: at.seq,
        reason: `blob ${sha256} is missing (this record references it)`,
      });
  return stored;
}

/** Every surface chunk against the records it was made from (a bad one is reported at `surface`: repair drops the chunks). */
function walkChunks(dbs: LogDbs, tails: Map<string, number>, problems: StoreProblem[], progress: WalkProgress): void {
  if (!dbs.surface) return; // a store no version with chunks has opened yet
  for (const { key, value } of dbs.surface.getRange()) {
    const [sessionId, fromSeq] = key;
    progress('data.mdb', sessionId, fromSeq);
    const reason = chunkMismatch(sessionId, fromSeq, value, tails.get(sessionId) ?? 0, (from, to) => {
      const out = [];
      for (const { key: k, value: v } of dbs.events.getRange({ start: [sessionId, from], end: [sessionId, to + 1] }))
        out.push(decodeFully(sessionId, k[1], v));
      return out;
    });
    if (reason !== undefined)
      problems.push({ where: 'surface', sessionId, seq: fromSeq, reason: `surface chunk at seq ${fromSeq}: ${reason}` });
  }
}

function walkJournal(
  journal: Journal,
  recorded: JournalState | undefined,
  tails: Map<string, number>,
  blobs: Set<string> | undefined,
  problems: StoreProblem[],
  checked: WalkResult['checked'],
  progress: WalkProgress,
): void {
  progress('journal');
  const journaled = new Map<string, number>(); // session → highest seq the frames hold
  const journaledBlobs = new Set<string>();
  let end: JournalState;
  try {
    const frames = journal.frames();
    for (;;) {
      const it = frames.next();
      if (it.done) {
        end = it.value;
        break;
      }
      checked.frames++;
      for (const op of JSON.parse(it.value.toString('utf8')) as JournalOp[]) {
        if (op[0] === 'e') journaled.set(op[1], Math.max(journaled.get(op[1]) ?? 0, op[2]));
        else if (op[0] === 'b') journaledBlobs.add(op[1]);
      }
    }
  } catch (e) {
    problems.push({
      where: isCorruptLogError(e) && e.sessionId.startsWith('journal ') ? e.sessionId.replace('journal ', 'journal/') : 'journal',
      reason: describe(e),
    });
    return;
  }
  if (recorded && end.nextFrame < recorded.nextFrame) {
    problems.push({
      where: 'journal',
      reason:
        `the journal ends after frame ${end.nextFrame - 1}, ` +
        `but the store recorded frames up to ${recorded.nextFrame - 1}: frames are missing`,
    });
  }
  // without a readable journal state data.mdb is not the file this journal describes (reported
  // above): its sessions say nothing about the journal
  if (!recorded) return;
  for (const sha256 of blobs ?? [])
    if (!journaledBlobs.has(sha256)) problems.push({ where: 'journal', reason: `the journal does not hold blob ${sha256}, data.mdb does` });
  for (const [sessionId, tail] of tails) {
    const inJournal = journaled.get(sessionId) ?? 0;
    if (inJournal < tail)
      problems.push({
        where: 'journal',
        sessionId,
        seq: inJournal + 1,
        reason: `the journal holds this session's events up to seq ${inJournal}, data.mdb up to ${tail}`,
      });
  }
}
