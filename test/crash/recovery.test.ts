import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { EventRecord } from '../../src/contracts/events.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';
import { killAllChildren, REPO_ROOT, spawnTs, type ChildRun } from './child-util.js';
import { readText } from './torture-lib.js';
import { scaled } from '../helpers/load.js';

/**
 * Crash recovery with real processes (test/crash/recovery-child.ts): a child runs a
 * scripted agent on an LMDB log and SIGKILLs itself at an exact point; another child opens the
 * same log and continues the run; the test then reads the log and the tools' ledger.
 */
const CHILD = join(REPO_ROOT, 'test/crash/recovery-child.ts');

async function life(scenario: string, phase: 'first' | 'recover', dir: string, killAfter?: string): Promise<ChildRun> {
  const saved = process.env.KILL_AFTER;
  if (killAfter) process.env.KILL_AFTER = killAfter;
  else delete process.env.KILL_AFTER;
  let child: ChildRun;
  try {
    child = spawnTs(CHILD, [scenario, phase, dir], { label: `recovery-child ${scenario} ${phase}` });
  } finally {
    if (saved === undefined) delete process.env.KILL_AFTER;
    else process.env.KILL_AFTER = saved;
  }
  await child.waitExit(60_000);
  expect(
    child.lines.filter((l) => l.startsWith('ERROR')),
    child.describe(),
  ).toEqual([]);
  return child;
}

const killed = (c: ChildRun) => {
  expect(c.exit?.signal, c.describe()).toBe('SIGKILL');
  expect(
    c.lines.some((l) => l.startsWith('KILL ')),
    c.describe(),
  ).toBe(true);
};
const done = (c: ChildRun) => expect(c.lines, c.describe()).toContain('DONE');
const results = (c: ChildRun) => c.lines.filter((l) => l.startsWith('RESULT ')).map((l) => JSON.parse(l.slice(7)) as { status: string });

async function logOf(dir: string): Promise<EventRecord[]> {
  const store = lmdbStore({ path: join(dir, 'db') });
  try {
    return await collect(store.readEvents('s'));
  } finally {
    await store.close();
  }
}

const ledgerOf = (dir: string) =>
  readText(join(dir, 'ledger.tsv'))
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const [what, pid, phase] = l.split('\t');
      return { what: what!, pid: Number(pid), phase: phase! };
    });

describe('recovery after a SIGKILL (real child processes)', () => {
  afterEach(killAllChildren);

  it(
    'a call denied in a respond keeps its denied result when the process dies before the batch result commit',
    async () => {
      const dir = tempDir('actorloop-recovery-');
      try {
        // life 1: prompt → suspended for approval of c1 (wire) and c2 (note); respond approves c1
        // and denies c2; the process dies right after the respond's first commit (approval/decided)
        const first = await life('deny', 'first', dir.path, 'approval/decided');
        killed(first);
        expect(results(first).map((r) => r.status)).toEqual(['suspended']);
        // life 2: open + continue the run to its end
        const second = await life('deny', 'recover', dir.path);
        done(second);
        expect(
          results(second).map((r) => r.status),
          second.describe(),
        ).toEqual(['succeeded']);
        const log = await logOf(dir.path);
        const decided = log.find((e) => e.type === 'approval/decided')!;
        expect(decided.payload.decisions).toEqual({ c1: 'approve', c2: 'deny' });
        // DESIGN §4 item 4: "A denied call gets an error tool result the model reads". Every call of
        // the assistant message must have a tool result (providers refuse a dangling tool call).
        const asked = log.find(
          (e) => e.type === 'assistant/message' && (e.payload.message as { toolCalls?: unknown[] }).toolCalls?.length,
        )!;
        const callIds = (asked.payload.message as { toolCalls: { id: string }[] }).toolCalls.map((c) => c.id);
        expect(callIds).toEqual(['c1', 'c2']);
        const resultIds = log.filter((e) => e.type === 'tool/result').map((e) => String(e.payload.callId));
        // (the denied result is committed with the decision, before the approved call's: any order
        // is fine for providers, which pair results with calls by id)
        expect(
          [...resultIds].sort(),
          `tool/result events: ${JSON.stringify(log.filter((e) => e.type === 'tool/result').map((e) => e.payload))}`,
        ).toEqual(['c1', 'c2']);
        const denied = log.find((e) => e.type === 'tool/result' && e.payload.callId === 'c2')!;
        expect(denied.payload.outcome).toMatchObject({ kind: 'completed', isError: true });
        // and the denied tool never ran
        expect(ledgerOf(dir.path).filter((l) => l.what.startsWith('note'))).toEqual([]);
      } finally {
        await dir.cleanup();
      }
    },
    scaled(120_000),
  );

  it(
    'a cancel recorded before a SIGKILL stands: the continue calls no model, runs no call again and ends the run cancelled',
    async () => {
      const dir = tempDir('actorloop-recovery-');
      try {
        // life 1: the look asks for the cancel as it runs; the process dies right after the cancel is durable
        const first = await life('cancel', 'first', dir.path, 'cancellation/requested');
        killed(first);
        // life 2: open + continue
        const second = await life('cancel', 'recover', dir.path);
        done(second);
        const recovery = JSON.parse(second.lines.find((l) => l.startsWith('RECOVERY '))!.slice(9));
        expect(recovery.interruptedRuns).toMatchObject([{ runId: 'r', cancelRequested: { reason: 'the user changed their mind' } }]);
        expect(
          results(second).map((r) => r.status),
          second.describe(),
        ).toEqual(['cancelled']);
        const log = await logOf(dir.path);
        expect(log.filter((e) => e.type === 'assistant/message')).toHaveLength(1);
        expect(
          log.filter((e) => e.type === 'tool/result').map((e) => [e.payload.callId, (e.payload.outcome as { kind: string }).kind]),
        ).toEqual([
          ['c1', 'skipped'],
          ['c2', 'uncertain-hanging'],
        ]);
        // the look ran once, in life 1; the payment never
        expect(ledgerOf(dir.path).map((l) => [l.what.split(' ')[0], l.phase])).toEqual([['look', 'first']]);
      } finally {
        await dir.cleanup();
      }
    },
    scaled(120_000),
  );

  it(
    'the maxToolCalls budget of a run still holds after a crash and a continue',
    async () => {
      const dir = tempDir('actorloop-recovery-');
      try {
        // life 1: maxToolCalls 2; the process dies right after step 1's results (1 call made)
        const first = await life('budget', 'first', dir.path, 'tool/result');
        killed(first);
        // life 2: continue the run
        const second = await life('budget', 'recover', dir.path);
        done(second);
        expect(
          results(second).map((r) => r.status),
          second.describe(),
        ).toEqual(['budget_exhausted']);
        const log = await logOf(dir.path);
        const calls = log.filter((e) => e.type === 'tool/call').map((e) => String(e.payload.callId));
        // DESIGN §4 item 8: a spent budget ends the run — the run (both attempts) may make 2 calls
        expect(calls, `tool calls of run r: ${calls.join(', ')}; ledger: ${JSON.stringify(ledgerOf(dir.path))}`).toEqual(['t1', 't2']);
      } finally {
        await dir.cleanup();
      }
    },
    scaled(120_000),
  );

  it(
    'after a crash, a call of the interrupted batch that needs a resource locked by an uncertain-hanging call is not run',
    async () => {
      const dir = tempDir('actorloop-recovery-');
      try {
        // life 1: batch [charge (exclusive, acct), audit (parallel, acct)]: the process dies inside charge
        const first = await life('lock', 'first', dir.path);
        killed(first);
        const second = await life('lock', 'recover', dir.path);
        done(second);
        const log = await logOf(dir.path);
        const outcomes = Object.fromEntries(
          log.filter((e) => e.type === 'tool/result').map((e) => [String(e.payload.callId), (e.payload.outcome as { kind: string }).kind]),
        );
        // charge: no reconcile → uncertain-hanging, acct stays locked (DESIGN §5)
        expect(outcomes.c1).toBe('uncertain-hanging');
        // DESIGN §4 item 5: calls naming the same resources never overlap, and a call that needs a
        // resource held by an uncertain-hanging lock is not run (a live batch skips it)
        const audits = ledgerOf(dir.path).filter((l) => l.what.startsWith('audit'));
        expect(audits, `audit ran after recovery while acct was locked; its outcome: ${outcomes.c2}`).toEqual([]);
        expect(outcomes.c2).toBe('skipped');
      } finally {
        await dir.cleanup();
      }
    },
    scaled(120_000),
  );

  it(
    'a resource released after recovery stays released when a later compaction copies the run',
    async () => {
      const dir = tempDir('actorloop-recovery-');
      try {
        // life 1: run r0 (long), then run r: the process dies inside charge (exclusive, locks acct)
        const first = await life('relock', 'first', dir.path);
        killed(first);
        // life 2: continue → charge uncertain-hanging (acct locked) → `big` waits for approval;
        // the app releases acct, then approves; big's long result makes the next call compact
        const second = await life('relock', 'recover', dir.path);
        done(second);
        expect(
          results(second).map((r) => r.status),
          second.describe(),
        ).toEqual(['suspended', 'succeeded']);
        const log = await logOf(dir.path);
        expect(
          log.some((e) => e.type === 'compaction'),
          'a compaction happened',
        ).toBe(true);
        const locks = second.lines.filter((l) => l.startsWith('LOCKS ')).map((l) => JSON.parse(l.slice(6)) as string[]);
        // guarantees.md: releaseResources frees the locks "here and after restarts"
        expect(locks, second.describe()).toEqual([['acct'], [], []]);
        const store = lmdbStore({ path: join(dir.path, 'db') });
        try {
          expect((await store.getHead('s'))?.heldLocks, 'locks held after the run, as the next open will see them').toEqual([]);
        } finally {
          await store.close();
        }
      } finally {
        await dir.cleanup();
      }
    },
    scaled(120_000),
  );

  it(
    'recovery.activeResourceLocks names the resources of an interrupted exclusive call that recovery leaves uncertain-hanging',
    async () => {
      const dir = tempDir('actorloop-recovery-');
      try {
        // life 1: the process dies inside charge (exclusive, no reconcile, resources ['acct'])
        const first = await life('lock', 'first', dir.path);
        killed(first);
        const second = await life('lock', 'recover', dir.path);
        done(second);
        const rec = JSON.parse(second.lines.find((l) => l.startsWith('RECOVERY '))!.slice(9)) as {
          activeResourceLocks: string[];
          uncertainToolCalls: { callId: string; resolution: string }[];
        };
        expect(rec.uncertainToolCalls.find((c) => c.callId === 'c1')?.resolution).toBe('uncertain-hanging');
        // guarantees.md, crash point "after tool/call is durable": without reconcile the call is
        // uncertain-hanging "and their resources stay locked"; the user sees recovery.activeResourceLocks
        expect(rec.activeResourceLocks, second.describe()).toEqual(['acct']);
      } finally {
        await dir.cleanup();
      }
    },
    scaled(120_000),
  );
});
