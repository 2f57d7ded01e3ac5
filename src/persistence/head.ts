import { z } from 'zod';
import type { EventRecord } from '../contracts/events.js';

/** Statuses after which a run is settled; other run/end statuses leave it resumable. */
export const UNSETTLED_END_STATUSES: ReadonlySet<string> = new Set(['suspended', 'detached', 'fenced']);

const RunPointer = z.object({
  runId: z.string(),
  turn: z.number().int().nonnegative(),
  startSeq: z.number().int().positive(),
  endSeq: z.number().int().positive().optional(),
});

/**
 * The per-session head record, updated in the same transaction as every append, so that
 * attaching, recovery and `loadSurface` never scan completed history.
 */
export const SessionHead = z.object({
  sessionId: z.string(),
  writerEpoch: z.number().int().nonnegative(),
  lastSeq: z.number().int().nonnegative(),
  lastTurn: z.number().int().nonnegative(),
  /** Seq of the newest surface epoch event (compaction, checkpoint), or 1. */
  surfaceStartSeq: z.number().int().positive(),
  /** The run started and not yet settled (its first run/start), if any. */
  openRun: RunPointer.nullable(),
  /** The most recently settled run. */
  lastSettledRun: RunPointer.nullable(),
  /** Inputs accepted and neither consumed nor cancelled, in acceptance order. */
  pendingInputs: z
    .array(z.object({ inputId: z.string(), seq: z.number().int().positive(), mode: z.enum(['steer', 'follow_up']) }))
    .default([]),
  /** Resource keys locked by uncertain tool calls and not yet released. */
  heldLocks: z.array(z.string()).default([]),
  /** Seq of the newest event carrying the app's stateContext (0: none). */
  stateContextSeq: z.number().int().nonnegative().default(0),
});
export type SessionHead = z.infer<typeof SessionHead>;

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isSeq = (v: unknown): v is number => isCount(v) && v > 0;
const isPointer = (p: unknown): boolean => {
  const r = p as { runId?: unknown; turn?: unknown; startSeq?: unknown; endSeq?: unknown } | null;
  return (
    p === null ||
    (typeof p === 'object' &&
      typeof r!.runId === 'string' &&
      isCount(r!.turn) &&
      isSeq(r!.startSeq) &&
      (r!.endSeq === undefined || isSeq(r!.endSeq)))
  );
};

/**
 * Whether `h` has every field of SessionHead with its type, checked by hand: a head read back
 * whose checksum matched is taken as written when it does (SessionHead.parse otherwise, which
 * fills the fields an older head lacks). The head is read on every append. A field added to
 * SessionHead must be added here (test/persistence/head.test.ts fails otherwise).
 */
export function isCurrentHead(h: unknown): h is SessionHead {
  const x = h as Partial<Record<keyof SessionHead, unknown>> | null;
  return (
    x !== null &&
    typeof x === 'object' &&
    typeof x.sessionId === 'string' &&
    isCount(x.writerEpoch) &&
    isCount(x.lastSeq) &&
    isCount(x.lastTurn) &&
    isSeq(x.surfaceStartSeq) &&
    isPointer(x.openRun) &&
    isPointer(x.lastSettledRun) &&
    Array.isArray(x.pendingInputs) &&
    Array.isArray(x.heldLocks) &&
    x.heldLocks.every((k) => typeof k === 'string') &&
    (x.pendingInputs as unknown[]).every((i) => {
      const p = i as { inputId?: unknown; seq?: unknown; mode?: unknown } | null;
      return (
        p !== null &&
        typeof p === 'object' &&
        typeof p.inputId === 'string' &&
        isSeq(p.seq) &&
        (p.mode === 'steer' || p.mode === 'follow_up')
      );
    }) &&
    isCount(x.stateContextSeq)
  );
}

export function newHead(sessionId: string): SessionHead {
  return {
    sessionId,
    writerEpoch: 0,
    lastSeq: 0,
    lastTurn: 0,
    surfaceStartSeq: 1,
    openRun: null,
    lastSettledRun: null,
    pendingInputs: [],
    heldLocks: [],
    stateContextSeq: 0,
  };
}

/** Folds newly appended records into the head (pure; the caller stores the result). */
export function advanceHead(head: SessionHead, records: readonly EventRecord[]): SessionHead {
  const next: SessionHead = { ...head };
  for (const r of records) {
    next.lastSeq = r.seq;
    if (r.turn > next.lastTurn) next.lastTurn = r.turn;
    if (r.surfaceOp === 'epoch') next.surfaceStartSeq = r.seq;
    if (r.type === 'input/accepted') {
      next.pendingInputs = [
        ...next.pendingInputs,
        { inputId: String(r.payload.inputId), seq: r.seq, mode: r.payload.mode as 'steer' | 'follow_up' },
      ];
    } else if (
      (r.type === 'input/cancelled' || r.type === 'user/message' || r.type === 'run/start') &&
      typeof r.payload.inputId === 'string'
    ) {
      next.pendingInputs = next.pendingInputs.filter((i) => i.inputId !== r.payload.inputId);
    }
    if (r.type === 'tool/result' && r.payload.copiedFrom === undefined) {
      // (a compaction's copy of a result is not a new outcome: its locks were counted once)
      const o = r.payload.outcome as { kind: string; settled?: boolean; resourceLocks?: string[]; releaseResources?: string[] };
      if (o.kind === 'uncertain-hanging' || (o.kind === 'cancelled' && o.settled === false)) {
        next.heldLocks = [...new Set([...next.heldLocks, ...(o.resourceLocks ?? [])])];
      } else if (o.kind === 'completed' && o.releaseResources?.length) {
        next.heldLocks = next.heldLocks.filter((k) => !o.releaseResources!.includes(k));
      }
    } else if (r.type === 'resources/released') {
      const keys = r.payload.keys as string[];
      next.heldLocks = next.heldLocks.filter((k) => !keys.includes(k));
    }
    if ((r.type === 'state/updated' || r.type === 'checkpoint/loaded') && r.payload.stateContext !== undefined)
      next.stateContextSeq = r.seq;
    if (r.type === 'run/start') {
      const runId = String(r.payload.runId);
      if (next.openRun?.runId !== runId) next.openRun = { runId, turn: r.turn, startSeq: r.seq };
    } else if (r.type === 'run/end' && next.openRun && next.openRun.runId === r.payload.runId) {
      if (!UNSETTLED_END_STATUSES.has(String(r.payload.status))) {
        next.lastSettledRun = { ...next.openRun, endSeq: r.seq };
        next.openRun = null;
      }
    }
  }
  return next;
}
