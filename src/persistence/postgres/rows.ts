import { createHash } from 'node:crypto';
import { CorruptLogError, InvariantViolation } from '../../contracts/errors.js';
import type { EventRecord } from '../../contracts/events.js';
import type { LogTxn } from '../append-core.js';
import { decodeRecord } from '../codec.js';
import { SessionHead } from '../head.js';
import { ident } from './schema.js';

/** The head columns of the sessions row, in the order the statements below use. */
export const HEAD_COLUMNS =
  'session_id, writer_epoch, head_seq, last_turn, surface_start_seq, state_context_seq, ' +
  'open_run, last_settled_run, pending_inputs, held_locks';

interface HeadRow {
  session_id: string;
  writer_epoch: string | number;
  head_seq: string | number;
  last_turn: string | number;
  surface_start_seq: string | number;
  state_context_seq: string | number;
  open_run: unknown;
  last_settled_run: unknown;
  pending_inputs: unknown;
  held_locks: unknown;
}

/** A sessions row read back through the head's zod schema (bigint columns arrive as text). */
export function headOf(sessionId: string, raw: unknown): SessionHead {
  const row = raw as HeadRow;
  const parsed = SessionHead.safeParse({
    sessionId: row.session_id,
    writerEpoch: Number(row.writer_epoch),
    lastSeq: Number(row.head_seq),
    lastTurn: Number(row.last_turn),
    surfaceStartSeq: Number(row.surface_start_seq),
    stateContextSeq: Number(row.state_context_seq),
    openRun: row.open_run ?? null,
    lastSettledRun: row.last_settled_run ?? null,
    pendingInputs: row.pending_inputs,
    heldLocks: row.held_locks,
  });
  if (!parsed.success || parsed.data.sessionId !== sessionId) {
    throw new CorruptLogError(
      sessionId,
      0,
      `head row is unreadable: ${parsed.error?.issues[0]?.message ?? `it names session ${JSON.stringify(row.session_id)}`}`,
    );
  }
  return parsed.data;
}

/** The statements of one schema, built once (names make them prepared statements per connection). */
export function statements(schema: string) {
  const s = ident(schema);
  // prepared-statement names are per connection: one per schema, so stores of two schemas can share a pool
  const id = createHash('sha256').update(schema).digest('hex').slice(0, 16);
  const tag = (name: string) => `actorloop_${name}_${id}`;
  return {
    attach: {
      name: tag('attach'),
      text:
        `INSERT INTO ${s}.sessions (${HEAD_COLUMNS}) VALUES ($1, 1, 0, 0, 1, 0, NULL, NULL, '[]', '[]') ` +
        `ON CONFLICT (session_id) DO UPDATE SET writer_epoch = sessions.writer_epoch + 1 RETURNING ${HEAD_COLUMNS}`,
    },
    head: { name: tag('head'), text: `SELECT ${HEAD_COLUMNS} FROM ${s}.sessions WHERE session_id = $1` },
    headForShare: { name: tag('head_share'), text: `SELECT ${HEAD_COLUMNS} FROM ${s}.sessions WHERE session_id = $1 FOR SHARE` },
    byIds: {
      name: tag('by_ids'),
      text: `SELECT seq, event_id, record FROM ${s}.events WHERE session_id = $1 AND event_id = ANY($2::text[])`,
    },
    byId: { name: tag('by_id'), text: `SELECT seq, record FROM ${s}.events WHERE session_id = $1 AND event_id = $2` },
    page: {
      name: tag('page'),
      text: `SELECT seq, record FROM ${s}.events WHERE session_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq LIMIT $4`,
    },
    sessions: { name: tag('sessions'), text: `SELECT session_id FROM ${s}.sessions ORDER BY session_id COLLATE "C"` },
    /**
     * The append: the fence and expected-seq check on the session row, the new head fields, and
     * the multi-row insert (which runs only if the fence matched). Its NOTIFY is sent after the
     * COMMIT, outside the transaction (schema.ts `notifyQuery`).
     */
    append: {
      name: tag('append'),
      text: `WITH fence AS (
          UPDATE ${s}.sessions SET head_seq = head_seq + $4, last_turn = $5, surface_start_seq = $6, state_context_seq = $7,
                 open_run = $8::jsonb, last_settled_run = $9::jsonb, pending_inputs = $10::jsonb, held_locks = $11::jsonb
           WHERE session_id = $1 AND writer_epoch = $2 AND head_seq = $3
          RETURNING session_id),
        ins AS (
          INSERT INTO ${s}.events (session_id, seq, event_id, type, record)
          SELECT f.session_id, u.seq, u.event_id, u.type, u.record
            FROM fence f, unnest($12::bigint[], $13::text[], $14::text[], $15::text[]) AS u(seq, event_id, type, record)
          RETURNING 1)
        SELECT (SELECT count(*) FROM fence)::int AS fenced, (SELECT count(*) FROM ins)::int AS inserted`,
    },
  };
}
export type Statements = ReturnType<typeof statements>;

/** The values of the append statement for records that follow `head` and give `next`. */
export function appendValues(
  head: SessionHead,
  next: SessionHead,
  writerEpoch: number,
  records: readonly EventRecord[],
  texts: readonly string[],
): unknown[] {
  const json = (v: unknown) => (v === null ? null : JSON.stringify(v));
  return [
    head.sessionId,
    writerEpoch,
    head.lastSeq,
    records.length,
    next.lastTurn,
    next.surfaceStartSeq,
    next.stateContextSeq,
    json(next.openRun),
    json(next.lastSettledRun),
    JSON.stringify(next.pendingInputs),
    JSON.stringify(next.heldLocks),
    records.map((r) => r.seq),
    records.map((r) => r.eventId),
    records.map((r) => r.type),
    texts,
  ];
}

/**
 * A LogTxn over what one append knows of a session: its head and the stored events that carry
 * the batch's event ids. Every stored id is indexed here (unlike LMDB, where generated ids are
 * not), so a seq the index did not name holds no event with the id asked for. Writes are captured.
 */
export class SnapshotTxn implements LogTxn {
  readonly events: { record: EventRecord; text: string }[] = [];
  nextHead: SessionHead | undefined;
  private readonly bySeq = new Map<number, EventRecord>();
  private readonly seqById = new Map<string, number>();
  constructor(
    sessionId: string,
    private readonly current: SessionHead | undefined,
    stored: readonly { seq: string | number; event_id: string; record: string }[] = [],
  ) {
    for (const row of stored) {
      const seq = Number(row.seq);
      const rec = decodeRecord(sessionId, seq, row.record);
      this.bySeq.set(seq, rec);
      this.seqById.set(row.event_id, seq);
    }
  }
  head() {
    return this.current;
  }
  seqOfEventId(_sid: string, id: string) {
    return this.seqById.get(id);
  }
  event(sid: string, seq: number): EventRecord {
    const e = this.bySeq.get(seq);
    if (e && e.sessionId !== sid) throw new InvariantViolation(`snapshot of ${e.sessionId} asked for ${sid}`, { sessionId: sid });
    return e as EventRecord; // undefined: no event with the id asked for (findEvent reads it as "not found")
  }
  putHead(h: SessionHead) {
    this.nextHead = h;
  }
  putEvent(record: EventRecord, text: string) {
    this.events.push({ record, text });
  }
  putEventId() {}
}
