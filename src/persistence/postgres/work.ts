import { Observable, Subject } from 'rxjs';
import { StaleWriterError } from '../../contracts/errors.js';
import { entryIdOf, InboxEntry, InboxOutcome, StoredInboxEntry, type LeaseInfo, type WorkerInfo } from '../../contracts/inbox.js';
import { sameEntryOrReason } from '../work-core.js';
import type { ClaimedSession, SubmitOutcome, WorkerRegistration, WorkStore } from '../work-store.js';
import { unavailable, type Connections } from './connection.js';
import { sqlStateOf, type PgPoolClient } from './pg-types.js';
import { channelName, ident } from './schema.js';
import { workArgs } from '../work-input.js';

/** The NOTIFY channel of a schema's inbox wake-ups. */
export const workChannelOf = (schema: string): string => channelName('actorloop-work', schema);

const ms = (n: string) => `(${n} * interval '1 millisecond')`;

function statements(schema: string, channel: string) {
  const s = ident(schema);
  return {
    entry: `SELECT session_id, entry_id, seq, entry, submitted_at, applied_epoch, applied_at, outcome
               FROM ${s}.inbox WHERE session_id = $1 AND entry_id = $2`,
    hasEvent: `SELECT 1 FROM ${s}.events WHERE session_id = $1 AND event_id = $2`,
    // one statement: an entry stored before (or an input already in the log) is reported, else the
    // session's counter is bumped and the entry inserted; the workers are woken after it commits
    submit: `WITH existing AS (SELECT entry FROM ${s}.inbox WHERE session_id = $1 AND entry_id = $2),
                  logged AS (SELECT 1 FROM ${s}.events WHERE $5::text IS NOT NULL AND session_id = $1 AND event_id = $5),
                  bump AS (INSERT INTO ${s}.session_work (session_id, inbox_seq, pending)
                             SELECT $1, 1, 1 WHERE NOT EXISTS (SELECT 1 FROM existing) AND NOT EXISTS (SELECT 1 FROM logged)
                           ON CONFLICT (session_id) DO UPDATE SET inbox_seq = session_work.inbox_seq + 1, pending = session_work.pending + 1
                           RETURNING inbox_seq),
                  ins AS (INSERT INTO ${s}.inbox (session_id, entry_id, seq, kind, entry)
                            SELECT $1, $2, inbox_seq, $3, $4 FROM bump RETURNING seq)
             SELECT (SELECT entry FROM existing) AS existing, EXISTS (SELECT 1 FROM logged) AS logged`,
    notify: `SELECT pg_notify($1, $2)`,
    pending: `SELECT session_id, entry_id, seq, entry, submitted_at, applied_epoch, applied_at, outcome
                 FROM ${s}.inbox WHERE session_id = $1 AND applied_at IS NULL ORDER BY seq`,
    mark: `WITH fence AS (SELECT 1 FROM ${s}.sessions WHERE session_id = $1 AND writer_epoch = $2 FOR SHARE),
             m AS (SELECT * FROM unnest($3::text[], $4::text[]) AS m(entry_id, outcome)),
             upd AS (UPDATE ${s}.inbox i SET applied_epoch = $2, applied_at = now(), outcome = m.outcome
                       FROM m WHERE EXISTS (SELECT 1 FROM fence) AND i.session_id = $1 AND i.entry_id = m.entry_id AND i.applied_at IS NULL
                       RETURNING i.seq),
             w AS (UPDATE ${s}.session_work
                     SET applied_seq = greatest(applied_seq, (SELECT max(seq) FROM upd)), pending = pending - (SELECT count(*) FROM upd)
                     WHERE session_id = $1 AND EXISTS (SELECT 1 FROM upd) RETURNING 1)
           SELECT (SELECT count(*) FROM fence) AS ok, (SELECT writer_epoch FROM ${s}.sessions WHERE session_id = $1) AS current,
                  (SELECT count(*) FROM w) AS w`,
    // the claim: rows with work and no live lease, skipping rows another claim (or a submit) holds
    claim: `WITH c AS (
               SELECT session_id, worker_id AS prev FROM ${s}.session_work
                WHERE (pending > 0 OR resume OR worker_id IS NOT NULL) AND (worker_id IS NULL OR lease_until < now())
                LIMIT $2 FOR UPDATE SKIP LOCKED)
             UPDATE ${s}.session_work w SET worker_id = $1, writer_epoch = NULL, lease_until = now() + ${ms('$3')}, resume = false
               FROM c WHERE w.session_id = c.session_id RETURNING w.session_id, c.prev`,
    bind: `UPDATE ${s}.session_work w SET writer_epoch = $3, lease_until = now() + ${ms('$4')} FROM ${s}.sessions x
             WHERE w.session_id = $1 AND w.worker_id = $2 AND w.lease_until >= now()
               AND x.session_id = w.session_id AND x.writer_epoch = $3 RETURNING 1`,
    renew: `UPDATE ${s}.session_work w SET lease_until = now() + ${ms('$4')}
              FROM unnest($2::text[], $3::bigint[]) AS l(session_id, epoch), ${s}.sessions x
             WHERE w.session_id = l.session_id AND w.worker_id = $1 AND w.writer_epoch = l.epoch AND w.lease_until >= now()
               AND x.session_id = l.session_id AND x.writer_epoch = l.epoch RETURNING w.session_id`,
    release: `UPDATE ${s}.session_work SET worker_id = NULL, writer_epoch = NULL, lease_until = NULL, resume = resume OR $4
               WHERE session_id = $1 AND worker_id = $2 AND ($3::bigint IS NULL OR writer_epoch = $3)
               RETURNING pending, resume`,
    heartbeat: `INSERT INTO ${s}.workers (worker_id, host, pid, concurrency, started_at, heartbeat_at, ttl_ms)
                  VALUES ($1, $2, $3, $4, now(), now(), $5)
                  ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = now(), ttl_ms = $5, concurrency = $4`,
    removeWorker: `DELETE FROM ${s}.workers WHERE worker_id = $1`,
    workers: `SELECT worker_id, host, pid, concurrency, started_at, heartbeat_at, heartbeat_at + ${ms('ttl_ms')} >= now() AS live
               FROM ${s}.workers ORDER BY worker_id`,
    leases: `SELECT session_id, worker_id, writer_epoch, lease_until, worker_id IS NOT NULL AND lease_until < now() AS expired,
                     inbox_seq, applied_seq, resume
               FROM ${s}.session_work WHERE pending > 0 OR resume OR worker_id IS NOT NULL ORDER BY session_id`,
    channel,
  };
}

interface EntryRow {
  session_id: string;
  entry_id: string;
  seq: string;
  entry: string;
  submitted_at: Date;
  applied_epoch: string | null;
  applied_at: Date | null;
  outcome: string | null;
}

function entryOf(r: EntryRow): StoredInboxEntry {
  return StoredInboxEntry.parse({
    sessionId: r.session_id,
    entryId: r.entry_id,
    seq: Number(r.seq),
    entry: JSON.parse(r.entry),
    submittedAt: r.submitted_at.toISOString(),
    ...(r.applied_at
      ? { applied: { writerEpoch: Number(r.applied_epoch), at: r.applied_at.toISOString(), outcome: JSON.parse(r.outcome!) } }
      : {}),
  });
}

/**
 * The PostgreSQL store's `work` (docs/scale-out.md): plain SQL on the schema's own tables, so that
 * a lease shares the session row's writer epoch (bind and renew check `sessions.writer_epoch`, a
 * mark is fenced on it). Claims take rows `FOR UPDATE SKIP LOCKED`; a submit (and a release that
 * leaves work) sends a NOTIFY that wakes workers on every machine, polling being the fallback —
 * after its write committed, never inside it (schema.ts `notifyQuery`).
 */
export class PgWorkStore implements WorkStore {
  private readonly sql: ReturnType<typeof statements>;
  private readonly wake = new Subject<string>();
  private listener: { client: PgPoolClient; release: () => void } | undefined;
  private listening = 0;
  private retry: NodeJS.Timeout | undefined;
  private closed = false;
  readonly wakeups$: Observable<string>;
  readonly wakesAcrossProcesses = true;

  constructor(
    private readonly conns: Connections,
    private readonly ready: () => Promise<void>,
    private readonly assertOpen: () => void,
    schema: string,
  ) {
    this.sql = statements(schema, workChannelOf(schema));
    this.wakeups$ = new Observable<string>((subscriber) => {
      const sub = this.wake.subscribe(subscriber);
      if (this.listening++ === 0) void this.listen();
      return () => {
        sub.unsubscribe();
        if (--this.listening === 0) this.unlisten();
      };
    });
  }

  private async listen(): Promise<void> {
    if (this.closed || this.listener || this.listening === 0) return;
    try {
      await this.ready();
      const conn = await this.conns.acquire();
      const entry = { client: conn.client, release: () => conn.done(true) };
      conn.client.on('notification', (msg) => {
        if (msg.channel === this.sql.channel && msg.payload !== undefined) this.wake.next(msg.payload);
      });
      conn.client.on('error', () => {
        if (this.listener === entry) this.listener = undefined;
        entry.release();
        this.retry = setTimeout(() => void this.listen(), 500);
      });
      await conn.client.query(`LISTEN ${ident(this.sql.channel)}`);
      if (this.closed || this.listening === 0) return entry.release();
      this.listener = entry;
    } catch {
      if (!this.closed) this.retry = setTimeout(() => void this.listen(), 1000); // the workers poll meanwhile
    }
  }

  private unlisten(): void {
    clearTimeout(this.retry);
    this.listener?.release();
    this.listener = undefined;
  }

  private async run<T>(what: string, kind: 'read' | 'write', fn: (c: PgPoolClient) => Promise<T>): Promise<T> {
    this.assertOpen();
    await this.ready();
    try {
      return await this.conns.with(fn);
    } catch (e) {
      throw unavailable(what, e, kind);
    }
  }

  async submit(sessionId: string, entry: InboxEntry): Promise<SubmitOutcome> {
    const e = workArgs.submit(sessionId, entry);
    const entryId = entryIdOf(e);
    for (let tries = 0; ; tries++) {
      try {
        const row = await this.run('work.submit', 'write', async (c) => {
          const r = (
            await c.query({
              text: this.sql.submit,
              values: [sessionId, entryId, e.kind, JSON.stringify(e), e.kind === 'input' ? `input:${e.inputId}` : null],
            })
          ).rows[0] as { existing: string | null; logged: boolean };
          // after the commit, in a transaction of its own (schema.ts notifyQuery): a NOTIFY inside
          // the submit would hold up every other commit of the database until this one is flushed.
          // The entry is durable by now; a wake-up that fails only leaves it to the workers' polling
          if (r.existing === null && !r.logged)
            await c.query({ text: this.sql.notify, values: [this.sql.channel, sessionId] }).catch(() => undefined);
          return r;
        });
        if (row.existing !== null) {
          const reason = sameEntryOrReason(JSON.parse(row.existing) as InboxEntry, e);
          return reason ? { status: 'refused', reason } : { status: 'already_accepted' };
        }
        if (row.logged) return { status: 'already_accepted', reason: 'the session log already holds this input' };
        return { status: 'accepted' };
      } catch (err) {
        // the same id submitted concurrently: the loser reads the winner's entry
        const cause = (err as { cause?: unknown }).cause ?? err;
        if (sqlStateOf(cause) === '23505' && tries < 3) continue;
        throw err;
      }
    }
  }

  async pending(sessionId: string): Promise<StoredInboxEntry[]> {
    workArgs.pending(sessionId);
    const rows = await this.run(
      'work.pending',
      'read',
      async (c) => (await c.query({ text: this.sql.pending, values: [sessionId] })).rows as EntryRow[],
    );
    return rows.map(entryOf);
  }

  async getEntry(sessionId: string, entryId: string): Promise<StoredInboxEntry | undefined> {
    workArgs.getEntry(sessionId, entryId);
    const rows = await this.run(
      'work.getEntry',
      'read',
      async (c) => (await c.query({ text: this.sql.entry, values: [sessionId, entryId] })).rows as EntryRow[],
    );
    return rows[0] ? entryOf(rows[0]) : undefined;
  }

  async markApplied(sessionId: string, writerEpoch: number, marks: readonly { entryId: string; outcome: InboxOutcome }[]): Promise<void> {
    const m = workArgs.markApplied(sessionId, writerEpoch, marks);
    if (m.length === 0) return;
    const row = await this.run(
      'work.markApplied',
      'write',
      async (c) =>
        (
          await c.query({
            text: this.sql.mark,
            values: [sessionId, writerEpoch, m.map((x) => x.entryId), m.map((x) => JSON.stringify(x.outcome))],
          })
        ).rows[0] as { ok: string; current: string | null },
    );
    if (Number(row.ok) === 0) throw new StaleWriterError(sessionId, writerEpoch, Number(row.current ?? 0));
  }

  async claim(workerId: string, options: { limit: number; leaseMs: number }): Promise<ClaimedSession[]> {
    const o = workArgs.claim(workerId, options);
    const rows = await this.run(
      'work.claim',
      'write',
      async (c) =>
        (await c.query({ text: this.sql.claim, values: [workerId, o.limit, o.leaseMs] })).rows as {
          session_id: string;
          prev: string | null;
        }[],
    );
    return rows.map((r) => ({ sessionId: r.session_id, expired: r.prev !== null, ...(r.prev !== null ? { previousOwner: r.prev } : {}) }));
  }

  async bind(sessionId: string, workerId: string, writerEpoch: number, leaseMs: number): Promise<boolean> {
    workArgs.bind(sessionId, workerId, writerEpoch, leaseMs);
    const rows = await this.run(
      'work.bind',
      'write',
      async (c) => (await c.query({ text: this.sql.bind, values: [sessionId, workerId, writerEpoch, leaseMs] })).rows,
    );
    return rows.length === 1;
  }

  async renew(workerId: string, leases: readonly { sessionId: string; writerEpoch: number }[], leaseMs: number): Promise<string[]> {
    const l = workArgs.renew(workerId, leases, leaseMs);
    if (l.length === 0) return [];
    const rows = await this.run(
      'work.renew',
      'write',
      async (c) =>
        (await c.query({ text: this.sql.renew, values: [workerId, l.map((x) => x.sessionId), l.map((x) => x.writerEpoch), leaseMs] }))
          .rows as { session_id: string }[],
    );
    return rows.map((r) => r.session_id);
  }

  async release(sessionId: string, workerId: string, writerEpoch: number | null, options: { resume: boolean }): Promise<void> {
    workArgs.release(sessionId, workerId, writerEpoch, options);
    await this.run('work.release', 'write', async (c) => {
      const r = (await c.query({ text: this.sql.release, values: [sessionId, workerId, writerEpoch, options.resume] })).rows[0] as
        | { pending: number; resume: boolean }
        | undefined;
      // work left behind: another worker may take it now
      if (r && (Number(r.pending) > 0 || r.resume)) await c.query({ text: this.sql.notify, values: [this.sql.channel, sessionId] });
    });
  }

  async heartbeat(worker: WorkerRegistration, ttlMs: number): Promise<void> {
    const w = workArgs.heartbeat(worker, ttlMs);
    await this.run('work.heartbeat', 'write', (c) =>
      c.query({ text: this.sql.heartbeat, values: [w.workerId, w.host, w.pid, w.concurrency, ttlMs] }),
    );
  }

  async removeWorker(workerId: string): Promise<void> {
    workArgs.removeWorker(workerId);
    await this.run('work.removeWorker', 'write', (c) => c.query({ text: this.sql.removeWorker, values: [workerId] }));
  }

  async listWorkers(): Promise<WorkerInfo[]> {
    const rows = await this.run(
      'work.listWorkers',
      'read',
      async (c) =>
        (await c.query(this.sql.workers)).rows as {
          worker_id: string;
          host: string;
          pid: number;
          concurrency: number;
          started_at: Date;
          heartbeat_at: Date;
          live: boolean;
        }[],
    );
    return rows.map((r) => ({
      workerId: r.worker_id,
      host: r.host,
      pid: Number(r.pid),
      concurrency: Number(r.concurrency),
      startedAt: r.started_at.toISOString(),
      heartbeatAt: r.heartbeat_at.toISOString(),
      live: r.live,
    }));
  }

  async listLeases(): Promise<LeaseInfo[]> {
    const rows = await this.run(
      'work.listLeases',
      'read',
      async (c) =>
        (await c.query(this.sql.leases)).rows as {
          session_id: string;
          worker_id: string | null;
          writer_epoch: string | null;
          lease_until: Date | null;
          expired: boolean;
          inbox_seq: string;
          applied_seq: string;
          resume: boolean;
        }[],
    );
    return rows.map((r) => ({
      sessionId: r.session_id,
      workerId: r.worker_id,
      writerEpoch: r.writer_epoch === null ? null : Number(r.writer_epoch),
      leaseUntil: r.lease_until?.toISOString() ?? null,
      expired: Boolean(r.expired),
      inboxSeq: Number(r.inbox_seq),
      appliedSeq: Number(r.applied_seq),
      resume: r.resume,
    }));
  }

  close(): void {
    this.closed = true;
    this.unlisten();
    this.wake.complete();
  }
}
