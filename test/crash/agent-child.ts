/**
 * Child program for the agent-level crash tests (test/crash/agent-torture.test.ts,
 * test/crash/agent-fencing.test.ts, `npm run torture`): real processes running scripted agents on
 * an LMDB event store, so that the parent can SIGKILL or SIGSTOP them at any instant.
 *
 *   node --import tsx test/crash/agent-child.ts torture [<dir>] [--wait-go]
 *   node --import tsx test/crash/agent-child.ts fence --wait-go
 *
 * `torture`: opens `createRuntime({ store: lmdbStore({ path: <dir>/db }), model: scriptedModel(…),
 * tools, delivery })` and drives the sessions of the plan (torture-lib `sessionIdsOf`, runs
 * `run-1..run-R`) until every run has settled, all sessions concurrently. The plan comes from the
 * `GO <json>` line (with --wait-go: the parent pre-spawns children, loading costs about a second of
 * CPU) or from the arguments and the environment (KILL_AT, KILL_P, SESSIONS, RUNS). For each
 * session: print `RECOVERY <json>` (what openSession found), then, as long as the log shows a run
 * started and not settled, `continue` it with a new attemptId (this process's pid in it), else
 * `prompt` the next run not yet started; `DONE` when all runs of all sessions settled.
 * Exclusive tools (`charge` with `reconcile`, `notify` without) append
 * `<idempotencyKey>\t<callId>\t<pid>` to `<dir>/ledger.tsv` (fsync'd); the delivery owner appends
 * `<finalMessageId>\t<runId>\t<sessionId>\t<pid>` to `<dir>/finals.tsv` (fsync'd); it is idempotent in the
 * sessions `isIdempotentSession` names (a runtime per kind, sharing one store).
 * Kill points (`killAt` = tool-inside | after-intent | inside-delivery | random, each reached point
 * kills with probability `killP`): `after-intent` at the start of an exclusive tool's execute
 * (its tool/call is committed, the ledger not yet written), `tool-inside` right after the ledger
 * write, `inside-delivery` right after the finals-ledger write; `random` = any of them.
 *
 * `fence`: one writer of the multi-process fencing chain, its job from `GO <json>` =
 * `{ path, b?: sessionId, a?: { session, variant, hold } }`: first (B role) opens session `b`
 * (fencing its frozen writer), continues its run to the end and prints `B_DONE <session> <json>`;
 * then (A role) opens session `a.session`, prompts a run whose exclusive tool `hold`/`hold_nr`
 * writes the ledger, prints `HOLDING <session> <key>` and waits (outside any write transaction)
 * for `RELEASE` on stdin; a second exclusive tool `after` follows in the same batch
 * (`same-batch`) or the next step (`next-step`). Prints `A_RESULT <json>` once the run settles.
 *
 * Protocol lines (stdout, each written with a synchronous write(2) so it is out before the next
 * step): `READY`, `RECOVERY <json>`, `ACK <session> <seq> <eventId>` (after every append promise
 * resolved, i.e. durable), `RUN <session> <runId> <attemptId> <kind>`, `RESULT <session> <runId>
 * <attemptId> <status>`, `TOOL <session> <name> <idempotencyKey>` (a tool's execute started),
 * `DELIVER <session> <finalMessageId>`, `KILL <point>` (just before SIGKILLing itself), `DONE`,
 * `ERROR <message>` (then exit 1).
 */
import { closeSync, existsSync, fsyncSync, openSync, readFileSync, writeSync } from 'node:fs';
import { z } from 'zod';
import { contentText } from '../../src/contracts/content.js';
import { createRuntime, type Runtime } from '../../src/runtime/runtime.js';
import type { ExecutionResult } from '../../src/contracts/requests.js';
import type { EventStore } from '../../src/persistence/event-store.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { scriptedModel, type ScriptedStep } from '../../src/providers/scripted.js';
import type { ModelRequest } from '../../src/contracts/model.js';
import { defineTool, type AnyTool, type ToolContext } from '../../src/tools/define-tool.js';
import { nextLine, say } from './child-util.js';
import {
  FENCE_PROMPT_RE,
  fenceScript,
  isIdempotentSession,
  KILL_POINTS,
  finalsLine,
  ledgerLine,
  parseLedger,
  PROMPT_RE,
  promptOf,
  runIdsOf,
  runScript,
  sessionIdsOf,
  SETTLED_NOT,
  trialPaths,
  type FenceJob,
  type KillPoint,
  type ScriptStep,
  type TorturePlan,
} from './torture-lib.js';

// ---------------------------------------------------------------------------------------------
// Output, input, kills

let killAt: KillPoint | 'random' | undefined;
let killP = 0;

/** At a kill point: SIGKILL this process (with probability killP) if the plan names this point. */
function maybeKill(point: KillPoint): void {
  if (!killAt || (killAt !== 'random' && killAt !== point)) return;
  if (Math.random() >= killP) return;
  say(`KILL ${point}`);
  process.kill(process.pid, 'SIGKILL');
  // SIGKILL is not catchable; make sure nothing at all runs until it lands.
  for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
}

/** Appends one line to a ledger file and fsyncs it before returning. */
function appendDurably(path: string, line: string): void {
  const fd = openSync(path, 'a');
  try {
    writeSync(fd, `${line}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

const ledgerHas = (path: string, key: string): boolean =>
  existsSync(path) && parseLedger(readFileSync(path, 'utf8')).entries.some((e) => e.key === key);

/** The store, printing `ACK` for every committed record; `close` is left to the owner (two runtimes share it). */
function ackingStore(inner: EventStore): EventStore {
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === 'append') {
        return async (...args: Parameters<EventStore['append']>) => {
          const records = await target.append(...args);
          for (const r of records) say(`ACK ${r.sessionId} ${r.seq} ${r.eventId}`);
          return records;
        };
      }
      if (prop === 'close') return async () => {};
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The scripted model: the step to answer is derived from the request (so a new process carries on). */
function modelFor(re: RegExp, scriptOf: (m: RegExpExecArray) => ScriptStep[]) {
  const step = (req: ModelRequest): ScriptedStep => {
    const msgs = req.messages;
    let i = msgs.length - 1;
    let m: RegExpExecArray | null = null;
    for (; i >= 0; i--) {
      if (msgs[i]!.role === 'user' && (m = re.exec(contentText(msgs[i]!.content)))) break;
    }
    if (!m) return { error: { message: 'no scripted prompt in the context', retryable: false } };
    const n = msgs.slice(i + 1).filter((x) => x.role === 'assistant').length;
    const script = scriptOf(m);
    const s = script[Math.min(n, script.length - 1)]!;
    if ('final' in s) return s.final;
    return { toolCalls: s.calls.map((c, k) => ({ id: `c${n + 1}-${k}`, name: c.name, arguments: c.args })) };
  };
  return scriptedModel([step], { loop: true });
}

const brief = (r: ExecutionResult) => ({
  status: r.status,
  outcome: r.outcome,
  checkpointCommitted: r.checkpointCommitted,
  ...(r.error ? { error: { kind: r.error.kind, message: r.error.message } } : {}),
  ...(r.finalMessageId ? { finalMessageId: r.finalMessageId } : {}),
});

// ---------------------------------------------------------------------------------------------
// torture

async function tortureMode(plan: TorturePlan): Promise<void> {
  killAt = plan.killAt;
  killP = plan.killP ?? 0;
  const paths = trialPaths(plan.dir);
  const inner = lmdbStore({ path: paths.db });
  const store = ackingStore(inner);

  /** An exclusive, side-effecting tool: the ledger line is its effect. */
  const effect = async (name: string, ctx: ToolContext): Promise<string> => {
    say(`TOOL ${ctx.sessionId} ${name} ${ctx.idempotencyKey}`);
    maybeKill('after-intent');
    appendDurably(paths.ledger, ledgerLine(ctx.idempotencyKey, ctx.callId, process.pid));
    maybeKill('tool-inside');
    // A short pause between effect and result commit, where a timed kill may land too.
    if (Math.random() < 0.5) await sleep(Math.random() * 3);
    return `executed: ${ctx.idempotencyKey} by ${process.pid}`;
  };
  const tools: AnyTool[] = [
    defineTool({
      name: 'charge',
      description: 'Charges an amount (side effect; can tell afterwards whether it happened)',
      parameters: z.object({ amount: z.number() }),
      execute: (_a, ctx) => effect('charge', ctx),
      reconcile: async (_a, ctx) => {
        // negative control: a broken tool whose reconcile silently runs the effect again
        if (plan.broken === 'reexecute') return { kind: 'completed', content: await effect('charge', ctx) };
        return ledgerHas(paths.ledger, ctx.idempotencyKey)
          ? { kind: 'completed', content: `reconciled: ${ctx.idempotencyKey} is in the ledger` }
          : undefined;
      },
    }),
    defineTool({
      name: 'notify',
      description: 'Sends a notification (side effect; cannot tell afterwards)',
      parameters: z.object({ text: z.string() }),
      execute: (_a, ctx) => effect('notify', ctx),
    }),
    defineTool({
      name: 'lookup',
      description: 'Reads something (no side effect)',
      mode: 'parallel',
      parameters: z.object({ q: z.string() }),
      execute: async ({ q }, ctx) => {
        say(`TOOL ${ctx.sessionId} lookup ${ctx.idempotencyKey}`);
        await sleep(Math.random() * 2);
        return `found ${q}`;
      },
    }),
  ];
  const model = modelFor(PROMPT_RE, (m) => runScript(m[1]!, m[2]!));
  const deliver = async (f: { finalMessageId: string; sessionId: string; runId: string }) => {
    say(`DELIVER ${f.sessionId} ${f.finalMessageId}`);
    appendDurably(paths.finals, finalsLine(f.finalMessageId, f.runId, f.sessionId, process.pid));
    maybeKill('inside-delivery');
  };
  const runtimes = new Map<boolean, Runtime>(
    [true, false].map((idempotent) => [idempotent, createRuntime({ store, model, tools, delivery: { deliver, idempotent } })]),
  );
  const runIds = runIdsOf(plan.runs);

  /** From the log: the run started and not settled (if any), and the next run not yet started. */
  const runState = async (sessionId: string): Promise<{ open?: string; next?: string }> => {
    const started = new Set<string>();
    const settled = new Set<string>();
    for await (const e of inner.readEvents(sessionId)) {
      if (e.type === 'run/start') started.add(String(e.payload.runId));
      else if (e.type === 'run/end' && !SETTLED_NOT.includes(String(e.payload.status))) settled.add(String(e.payload.runId));
    }
    const open = [...started].filter((r) => !settled.has(r));
    if (open.length > 1) throw new Error(`${sessionId}: more than one open run: ${open.join(', ')}`);
    const next = runIds.find((r) => !started.has(r));
    return { ...(open[0] ? { open: open[0] } : {}), ...(next ? { next } : {}) };
  };

  await Promise.all(
    sessionIdsOf(plan.sessions).map(async (sessionId) => {
      const session = await runtimes.get(isIdempotentSession(sessionId))!.openSession(sessionId);
      say(`RECOVERY ${JSON.stringify(session.recovery)}`);
      let first = true;
      let attempts = 0;
      for (;;) {
        const st = await runState(sessionId);
        if (first) {
          first = false;
          const interrupted = session.recovery.interruptedRuns.map((r) => r.runId);
          if (interrupted.join() !== (st.open ?? ''))
            throw new Error(`${sessionId}: recovery names interrupted runs [${interrupted.join()}], the log says ${st.open ?? 'none'}`);
        }
        if (++attempts > 4 * plan.runs + 8) throw new Error(`${sessionId}: too many attempts in one process (a run that never settles?)`);
        let runId: string;
        let attemptId: string;
        let r: ExecutionResult;
        if (st.open) {
          runId = st.open;
          attemptId = `${runId}.p${process.pid}.${attempts}`;
          say(`RUN ${sessionId} ${runId} ${attemptId} continue`);
          r = await session.execute({ kind: 'continue', runId, attemptId });
        } else if (st.next) {
          runId = st.next;
          attemptId = `${runId}.a1`;
          say(`RUN ${sessionId} ${runId} ${attemptId} prompt`);
          r = await session.execute({ kind: 'prompt', runId, attemptId, message: promptOf(sessionId, runId) });
        } else break;
        say(`RESULT ${sessionId} ${runId} ${attemptId} ${r.status}`);
      }
      await session.close();
    }),
  );
  say('DONE');
  for (const rt of runtimes.values()) await rt.close();
  await inner.close();
}

// ---------------------------------------------------------------------------------------------
// fence

async function fenceMode(job: FenceJob): Promise<void> {
  const paths = trialPaths(job.path);
  const inner = lmdbStore({ path: paths.db });
  let holdSession: string | undefined;
  const hold = async (name: string, ctx: ToolContext): Promise<string> => {
    say(`TOOL ${ctx.sessionId} ${name} ${ctx.idempotencyKey}`);
    appendDurably(paths.ledger, ledgerLine(ctx.idempotencyKey, ctx.callId, process.pid));
    if (ctx.sessionId === holdSession) {
      say(`HOLDING ${ctx.sessionId} ${ctx.idempotencyKey}`);
      await nextLine((l) => l === 'RELEASE');
      say(`RELEASED ${ctx.sessionId}`);
    }
    return `executed: ${ctx.idempotencyKey} by ${process.pid}`;
  };
  const reconcile = (_a: unknown, ctx: ToolContext) =>
    ledgerHas(paths.ledger, ctx.idempotencyKey)
      ? { kind: 'completed' as const, content: `reconciled: ${ctx.idempotencyKey} is in the ledger` }
      : undefined;
  const none = z.object({});
  const tools: AnyTool[] = [
    defineTool({
      name: 'hold',
      description: 'A slow side effect (reconcilable)',
      parameters: none,
      execute: (_a, ctx) => hold('hold', ctx),
      reconcile,
    }),
    defineTool({ name: 'hold_nr', description: 'A slow side effect', parameters: none, execute: (_a, ctx) => hold('hold_nr', ctx) }),
    defineTool({
      name: 'after',
      description: 'The side effect that follows',
      parameters: none,
      execute: (_a, ctx) => {
        say(`TOOL ${ctx.sessionId} after ${ctx.idempotencyKey}`);
        appendDurably(paths.ledger, ledgerLine(ctx.idempotencyKey, ctx.callId, process.pid));
        return `executed: ${ctx.idempotencyKey} by ${process.pid}`;
      },
      reconcile,
    }),
  ];
  const model = modelFor(FENCE_PROMPT_RE, (m) => fenceScript(m[2] as 'same-batch' | 'next-step', m[3]!));
  const rt = createRuntime({ store: ackingStore(inner), model, tools });
  if (job.b) {
    const s = await rt.openSession(job.b, { takeover: true }); // A lives (stopped): B fences it on purpose
    say(`B_ATTACHED ${job.b} ${JSON.stringify(s.recovery)}`);
    const open = s.recovery.interruptedRuns[0];
    if (!open) throw new Error(`B: session ${job.b} has no interrupted run`);
    const r = await s.execute({ kind: 'continue', runId: open.runId, attemptId: `${open.runId}.b${process.pid}` });
    say(`B_DONE ${job.b} ${JSON.stringify(brief(r))}`);
    await s.close();
  }
  if (job.a) {
    holdSession = job.a.session;
    const s = await rt.openSession(job.a.session);
    say(`A_ATTACHED ${job.a.session} ${s.recovery.writerEpoch}`);
    const r = await s.execute({
      kind: 'prompt',
      runId: 'run-1',
      attemptId: `run-1.a${process.pid}`,
      message: `FENCE ${job.a.session} ${job.a.variant} ${job.a.hold}`,
    });
    say(`A_RESULT ${job.a.session} ${JSON.stringify(brief(r))}`);
    await s.close();
  }
  await rt.close();
  await inner.close();
  say('DONE');
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const [mode, ...rest] = process.argv.slice(2);
  const waitGo = rest.includes('--wait-go');
  const positional = rest.filter((a) => !a.startsWith('--'));
  let job: unknown;
  if (waitGo) {
    // Pre-spawned by the parent: the imports are done; the store is opened only on cue.
    say('READY');
    const go = await nextLine((l) => l.startsWith('GO '));
    job = JSON.parse(go.slice(3));
  }
  if (mode === 'torture') {
    const env = process.env;
    const k = env.KILL_AT;
    const plan: TorturePlan = (job as TorturePlan | undefined) ?? {
      dir: positional[0]!,
      sessions: Number(env.SESSIONS ?? 3),
      runs: Number(env.RUNS ?? 4),
      ...(k === 'random' || (KILL_POINTS as readonly string[]).includes(k ?? '')
        ? { killAt: k as KillPoint | 'random', killP: Number(env.KILL_P ?? 0.3) }
        : {}),
    };
    if (!plan.dir) throw new Error('usage: agent-child.ts torture <dir> (or --wait-go and a GO line)');
    await tortureMode(plan);
  } else if (mode === 'fence') {
    if (!job) throw new Error('fence mode needs --wait-go and a GO line');
    await fenceMode(job as FenceJob);
  } else {
    throw new Error(`unknown mode ${String(mode)}`);
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    const err = e instanceof Error ? e : new Error(String(e));
    say(`ERROR ${err.name} ${err.message.replace(/\n/g, ' ')}`);
    process.exit(1);
  },
);
