/**
 * One seed of the deterministic simulator (issue 20): the seed draws a fault profile, a few
 * sessions and their workloads, then the real runtime (createRuntime over a fault-injecting view of
 * one memory store, with the world's clock and ids) runs them in simulated processes that crash,
 * pause and are taken over. When the world has nothing left to do, the surviving processes are
 * dropped and a fault-free process reopens every session and resumes what is open (every run must
 * settle or be resumable); then the invariants are checked against the log and the ledgers.
 *
 * This module must not import vitest: `npm run sim` (test/sim/run.ts) imports it too.
 */
import { tokenPrice } from '../crash/budget-pricing.js';
import { createRuntime } from '../../src/runtime/runtime.js';
import type { ExecutionSession } from '../../src/runtime/execution-session.js';
import { memoryStore } from '../../src/persistence/memory-store.js';
import type { EventRecord } from '../../src/contracts/events.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import type { Envelope } from '../../src/streams/envelopes.js';
import { AckLedger, faultyStore, type FaultControl, type StoreBreak } from './faulty-store.js';
import {
  COMPACTION_PROMPT,
  Ledgers,
  NO_OUTSIDE_FAULTS,
  simDelivery,
  simModel,
  simTools,
  type Outside,
  type OutsideFaults,
} from './outside.js';
import { afterStandingCancel, checkInvariants, type SeedFacts } from './invariants.js';
import { Watch, watchedStore } from './watch.js';
import { attemptIn, dropEveryProcess, Hosts, inProc, type Host } from './hosts.js';
import { never, World } from './world.js';

/**
 * Deliberately broken variants, each shown to be caught: `reexecute` (an exclusive call run again
 * on recovery), `blind-retry` (an append whose ack was lost retried as new events), the store's
 * promises broken one at a time (faulty-store.ts `StoreBreak`), and `no-idempotency` (a durable
 * store that writes an append sent again as new events).
 */
export type Broken = 'reexecute' | 'blind-retry' | StoreBreak | 'no-idempotency';
const STORE_BREAKS: readonly string[] = ['fence-blind', 'stale-head', 'forget-locks', 'early-ack'] satisfies StoreBreak[];

export interface SeedOptions {
  seed: number;
  /** Follow only this many choices of the seed's schedule, then choose benignly. */
  prefix?: number;
  broken?: Broken;
}

export interface SeedReport {
  seed: number;
  violations: string[];
  /** The log (without wall-clock timestamps) and the world's notes: identical for identical seeds. */
  trace: string[];
  /** Choices the seed's schedule made. */
  choices: number;
  tasks: number;
  /** What ran, for the figures: sessions, runs, crashes, takeovers. */
  stats: { sessions: number; events: number; crashes: number; takeovers: number };
  /** How often the watch's invariants were put to the test (watch.ts). */
  exercised: Watch['exercised'];
}

const MAX_TASKS = 30_000;
const APPROVAL_TIMEOUT_MS = 1_000;

export async function runSeed(opts: SeedOptions): Promise<SeedReport> {
  const world = new World(opts.seed, opts.prefix ?? Infinity);
  const rng = world.rng;
  const level = () => rng.pick([0, 0.02, 0.08]);
  const ctl: FaultControl = {
    faults: { fail: level(), ackLost: level(), crash: level(), readFail: rng.pick([0, 0.01]), repeat: rng.pick([0, 0.05]) },
    crashesLeft: rng.int(3),
    ...(opts.broken === 'blind-retry' ? { blindRetry: true } : {}),
    ...(opts.broken !== undefined && STORE_BREAKS.includes(opts.broken) ? { broken: opts.broken as StoreBreak } : {}),
  };
  const outsideFaults: OutsideFaults = {
    modelRetryable: level(),
    modelFatal: rng.pick([0, 0.01]),
    modelStall: rng.pick([0, 0.02]),
    modelCut: level(),
    modelMalformed: level(),
    modelInvalid: rng.pick([0, 0.01]),
    toolFail: level(),
    toolLate: level(),
    toolHang: rng.pick([0, 0.03]),
    toolStubborn: rng.pick([0, 0.02]),
    deliveryThrow: level(),
    verifierReject: level(),
    finalReject: level(),
  };
  const ledgers = new Ledgers();
  const watch = new Watch();
  let callN = 0;
  const outside: Outside = {
    world,
    ledgers,
    watch,
    faults: outsideFaults,
    nextCallId: () => `c${++callN}`,
    maxToolRounds: rng.range(1, 3),
    ...(opts.broken === 'reexecute' ? { reexecute: true } : {}),
  };
  const idempotentOwner = rng.int(2) === 1;
  const sessionIds = Array.from({ length: 1 + rng.int(2) }, (_, i) => `s${i + 1}`);
  const compact = rng.int(3) === 1;
  const config = {
    ...(compact ? { contextWindow: 360, outputReserve: 160 } : {}),
    maxProviderAttempts: 3,
    retryBackoffMs: 10,
    approvalTimeoutMs: APPROVAL_TIMEOUT_MS,
    cancelGraceMs: 50,
    compactionPrompt: COMPACTION_PROMPT,
  };
  const budget = {
    maxSteps: rng.pick([20, 3, 5]),
    ...(rng.int(3) === 1 ? { maxToolCalls: 4 } : {}),
    ...(rng.int(3) === 1 ? { maxOutputTokens: 60 } : {}),
    ...(rng.int(4) === 1 ? { maxDurationMs: 300 } : {}),
    // a cost budget (with tokenPrice) for a third of the seeds, drawn from the seed itself: the
    // schedule's own choices (and every seed kept for a bug it found) stay as they were
    ...((Math.imul(opts.seed, 2654435761) >>> 0) % 3 === 1 ? { maxCost: '0.3' } : {}),
  };
  world.note(
    `profile: sessions ${sessionIds.length}, store ${JSON.stringify(ctl.faults)} crashes<=${ctl.crashesLeft}, idempotent owner ${idempotentOwner}, budget ${JSON.stringify(budget)}, compaction ${compact}`,
  );

  const durable = watchedStore(opts.broken === 'no-idempotency' ? withoutIdempotency(memoryStore()) : memoryStore(), watch, sessionIds);
  const acks = new AckLedger();
  let idN = 0;
  const facts: SeedFacts = { budget, idempotentOwner, receipts: new Set(), recoveries: [] };
  let crashes = 0;
  let takeovers = 0;

  const boot = (): Host => {
    const proc = world.newProc();
    const runtime = createRuntime({
      store: faultyStore(durable, proc, world, ctl, acks, watch),
      model: simModel(outside, proc),
      tools: simTools(outside, proc),
      delivery: simDelivery(outside, proc, idempotentOwner),
      verifier: (name) => (rng.chance(outside.faults.verifierReject) ? `sim verifier rejects ${name}` : undefined),
      finalVerifier: () => (rng.chance(outside.faults.finalReject) ? 'sim final verifier: say more' : undefined),
      askUser: true,
      systemPrompt: 'sim agent',
      config,
      budget,
      ...(budget.maxCost !== undefined ? { pricing: tokenPrice } : {}),
      clock: proc.clock(),
      ids: { instanceId: () => `i${++idN}`, eventId: () => `e${++idN}` },
    });
    return { proc, runtime, sessions: new Map() };
  };

  let finalPhase = false;
  const hosts = new Hosts(world, facts, boot, {
    ended: () => finalPhase,
    crashed: () => crashes++,
    opened: (sid, s) => track(sid, s),
  });
  const sessionOf = (sid: string) => hosts.session(sid);

  // what each session's client knows of its runs (from the run_start envelopes)
  const runsOf = new Map<string, { runId: string; runEpoch: number; instance: string }>();
  const track = (sid: string, s: ExecutionSession) => {
    s.events$.subscribe((env: Envelope) => {
      if (env.event.type === 'run_start')
        runsOf.set(sid, { runId: env.event.runId, runEpoch: env.event.runEpoch, instance: env.event.sessionInstanceId });
    });
    const open = s.recovery.interruptedRuns[0];
    if (open) runsOf.set(sid, { runId: open.runId, runEpoch: open.runEpoch, instance: s.sessionInstanceId });
  };

  let attemptN = 0;
  /** Resumes the session's open run, if any: responds to what it waits for, else continues it. */
  const resume = async (sid: string, h: Host, s: ExecutionSession): Promise<'none' | 'done' | 'gone'> => {
    const status = s.snapshot().status;
    if (status !== 'suspended' && status !== 'detached') return 'none';
    const runId = runsOf.get(sid)?.runId ?? s.recovery.interruptedRuns[0]?.runId;
    if (!runId) return 'none';
    const attemptId = `${runId}.a${++attemptN}`;
    let req;
    const pending = s.pendingRequest;
    if (status === 'suspended' && pending) {
      if (pending.kind === 'approval') {
        const how = finalPhase ? 1 : rng.int(4); // approve, deny, leave out, too late
        if (how === 3) {
          world.note(`${sid}: approval answered too late`);
          await world.sleep(APPROVAL_TIMEOUT_MS + 1);
        }
        const decisions: Record<string, 'approve' | 'deny'> = {};
        if (how !== 2) for (const c of pending.calls) decisions[c.callId] = how === 1 ? 'deny' : 'approve';
        req = { kind: 'respond' as const, runId, attemptId, questionId: pending.questionId, answer: { decisions } };
      } else {
        req = { kind: 'respond' as const, runId, attemptId, questionId: pending.questionId, answer: rng.pick(['yes', 'no', 'the second']) };
      }
    } else {
      const locks = s.activeResourceLocks;
      if (locks.length > 0 && (finalPhase || rng.int(2) === 1)) {
        const r = await inProc(h.proc, s.releaseResources(locks));
        if (!r) return 'gone';
        world.note(`${sid}: released ${locks.join(',')}${'error' in r ? ` FAILED ${(r.error as Error).message}` : ''}`);
      }
      req = { kind: 'continue' as const, runId, attemptId };
    }
    return (await attemptIn(world, facts, sid, { h, s }, req)) ? 'done' : 'gone';
  };

  const client = async (sid: string, prompts: number) => {
    let promptN = 0;
    for (let actions = 0; actions < 14; actions++) {
      if (finalPhase) return; // the fault-free recovery takes over (a client still waiting on a dropped process stops)
      const at = await sessionOf(sid);
      if (finalPhase) return;
      if (!at) continue;
      const { h, s } = at;
      const resumed = await resume(sid, h, s);
      if (resumed !== 'none') continue;
      const idle = await inProc(h.proc, s.waitForIdle());
      if (!idle) continue;
      if (s.snapshot().status === 'suspended' || s.snapshot().status === 'detached') continue;
      if (promptN >= prompts) return;
      promptN++;
      await attemptIn(
        world,
        facts,
        sid,
        { h, s },
        {
          kind: 'prompt',
          runId: `${sid}-r${promptN}`,
          attemptId: `${sid}-r${promptN}.a1`,
          message: `task ${promptN} of ${sid}`,
        },
      );
    }
  };

  // chaos: inputs, stops, cancels and detaches at random moments, sent to whichever process hosts the session
  let inputN = 0;
  const chaos = (sid: string, n: number) => {
    for (let i = 0; i < n; i++) {
      world.at(world.now + rng.range(1, 400), () => {
        const h = hosts.current;
        const p = h.sessions.get(sid);
        if (!p || !h.proc.alive || finalPhase) return;
        const kind = rng.int(7);
        void p.then(async (s) => {
          if (!s) return;
          const cur = runsOf.get(sid);
          try {
            switch (kind) {
              case 0:
              case 1: {
                const inputId = `${sid}-in${++inputN}`;
                const mode = kind === 0 ? 'steer' : 'follow_up';
                world.note(`${sid}: submit ${mode} ${inputId}`);
                const r = await inProc(h.proc, s.submitInput({ inputId, message: `more ${inputId}`, mode }));
                if (r && 'value' in r) facts.receipts.add(`${sid}\u0000${inputId}`);
                if (r && 'error' in r) world.note(`${sid}: submit ${inputId} failed: ${(r.error as Error).message}`);
                break;
              }
              case 2: {
                if (inputN === 0) break;
                const inputId = `${sid}-in${rng.range(1, inputN)}`;
                const r = await inProc(h.proc, s.cancelInput(inputId));
                world.note(`${sid}: cancelInput ${inputId}${r && 'error' in r ? ` failed: ${(r.error as Error).name}` : ''}`);
                break;
              }
              case 3: {
                if (!cur || cur.instance !== s.sessionInstanceId) break;
                world.note(`${sid}: stop after round ${cur.runId}#${cur.runEpoch}`);
                const r = await inProc(
                  h.proc,
                  s.stopAfterCurrentToolRound({
                    sessionId: sid,
                    sessionInstanceId: cur.instance,
                    interactionId: cur.runId,
                    expectedRunEpoch: cur.runEpoch,
                    idempotencyKey: `stop-${cur.runId}-${cur.runEpoch}`,
                  }),
                );
                if (r && 'error' in r) world.note(`${sid}: stop refused: ${(r.error as Error).name}`);
                break;
              }
              case 4:
                world.note(`${sid}: requestCancel`);
                await inProc(h.proc, s.requestCancel());
                break;
              case 5:
                world.note(`${sid}: requestDetach → ${s.requestDetach()}`);
                break;
              default:
                await inProc(h.proc, s.setStateContext({ t: world.now }));
            }
          } catch (e) {
            world.note(`${sid}: chaos ${kind} threw ${(e as Error).name}`);
          }
        });
      });
    }
  };

  // process faults: a crash at a random moment, or a takeover (the old writer paused, woken later)
  const procFaults = rng.int(3);
  for (let i = 0; i < procFaults; i++) {
    world.at(world.now + rng.range(5, 600), () => {
      if (finalPhase) return;
      const h = hosts.current;
      if (!h.proc.alive || h.proc.superseded) return;
      if (rng.int(2) === 0) {
        if (ctl.crashesLeft <= 0) return;
        ctl.crashesLeft--;
        world.note(`world: crash proc ${h.proc.id}`);
        h.proc.crash();
      } else {
        takeovers++;
        world.note(`world: takeover of proc ${h.proc.id}`);
        h.proc.pause();
        h.proc.supersede();
        hosts.replace(true);
        world.at(world.now + rng.range(1, 300), () => h.proc.wake());
      }
    });
  }

  for (const sid of sessionIds) {
    void client(sid, 1 + rng.int(2));
    chaos(sid, rng.int(4));
  }
  const finished = await world.run(MAX_TASKS);
  if (!finished) world.note('world: task limit reached');

  // the last word: every process dropped, a fault-free one resumes every session
  finalPhase = true;
  dropEveryProcess(world, ctl);
  outside.faults = NO_OUTSIDE_FAULTS;
  outside.maxToolRounds = 0;
  delete outside.reexecute;
  hosts.replace(false);
  const settleAll = async () => {
    for (const sid of sessionIds) {
      const before = await durable.getHead(sid);
      // nothing open and nothing waiting: nothing to resume (and opening would change nothing)
      if (before && before.openRun === null && before.pendingInputs.length === 0 && before.heldLocks.length === 0) continue;
      for (let i = 0; i < 8; i++) {
        const at = await sessionOf(sid);
        if (!at) continue;
        await inProc(at.h.proc, at.s.waitForIdle());
        if ((await resume(sid, at.h, at.s)) === 'none') break;
      }
      const at = await sessionOf(sid);
      if (!at) continue;
      // the state the system reaches by itself: no prompt is sent to move what it left waiting
      await inProc(at.h.proc, at.s.waitForIdle());
    }
    await hosts.current.runtime.close();
  };
  let settled = false;
  void settleAll().then(() => (settled = true));
  const finalFinished = await world.run(MAX_TASKS * 2);

  const logs = new Map<string, EventRecord[]>();
  for (const sid of sessionIds) {
    const log: EventRecord[] = [];
    for await (const e of durable.readEvents(sid)) log.push(e);
    logs.set(sid, log);
  }
  const violations = [...checkInvariants({ logs, acks, ledgers, facts }), ...watch.problems];
  if (!finalFinished || !settled)
    violations.unshift(
      `the fault-free recovery did not finish (${finalFinished ? 'it waits on something no task will resolve' : 'task limit'})`,
    );
  const trace = [...world.notes, ...[...logs.values()].flatMap((l) => l.map(traceLine))];
  return {
    seed: opts.seed,
    violations,
    trace,
    choices: world.rng.choices.length,
    tasks: world.tasksRun,
    stats: { sessions: sessionIds.length, events: [...logs.values()].reduce((n, l) => n + l.length, 0), crashes, takeovers },
    exercised: { ...watch.exercised, attemptsAfterCancel: [...logs.values()].reduce((n, l) => n + afterStandingCancel(l).attempts, 0) },
  };
}

/**
 * The broken `no-idempotency` variant of the durable store: an append whose every event is already
 * stored is written again as new events at the tail (as if the store had no event-id check).
 */
function withoutIdempotency<S extends EventStore>(inner: S): S {
  const append: EventStore['append'] = async (sid, epoch, expectedSeq, drafts) => {
    const stored = await Promise.all(
      drafts.map((d) => (d.eventId === undefined ? Promise.resolve(undefined) : inner.getEventById(sid, d.eventId))),
    );
    if (drafts.length === 0 || stored.some((e) => e === undefined)) return inner.append(sid, epoch, expectedSeq, drafts);
    const head = await inner.getHead(sid);
    return inner.append(
      sid,
      epoch,
      (head?.lastSeq ?? 0) + 1,
      drafts.map(({ eventId: _id, ...d }) => d),
    );
  };
  return new Proxy(inner, {
    get: (t, p, r) =>
      p === 'append'
        ? append
        : typeof Reflect.get(t, p, r) === 'function'
          ? (Reflect.get(t, p, r) as (...a: unknown[]) => unknown).bind(t)
          : Reflect.get(t, p, r),
  });
}

/** One log record as a trace line (without occurredAt, the store's wall clock). */
export function traceLine(e: EventRecord): string {
  const { occurredAt: _t, sessionId, seq, writerEpoch, turn, step, attempt, type, eventId, payload } = e;
  return `${sessionId}#${seq} w${writerEpoch} ${turn}.${step}.${attempt} ${type} ${eventId} ${JSON.stringify(payload)}`;
}

export { never };
