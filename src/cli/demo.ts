import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { ExecutionSession } from '../runtime/execution-session.js';
import { createRuntime } from '../runtime/runtime.js';
import { isExecutionBusy, isSessionHeldError, isStaleWriterError, isValidationError } from '../contracts/errors.js';
import type { ExecutionRequest, ExecutionResult } from '../contracts/requests.js';
import { DEFAULT_DATA_DIR, DataDir, PostgresUrl, SessionId, dataDirOf, openDemoStore } from './data.js';
import { DEMO_PROMPT, DEMO_SYSTEM_PROMPT, Pace, Provider, chooseProvider, demoModel } from './demo-agent.js';
import { refuseChildSession } from './child-session.js';
import { demoPaths, demoTools, prepareDemoFiles } from './demo-tools.js';
import { CliError, EXIT, parseOptions, redactUrl } from './errors.js';
import { Progress, styles, type Sink } from './progress.js';
import { describeRecovery } from './recovery.js';
import { command } from './invocation.js';

export const DemoOptions = z.object({
  session: SessionId.optional(),
  data: DataDir.optional(),
  /** The event log in PostgreSQL (the data dir still holds the demo tools' files). */
  postgres: PostgresUrl.optional(),
  provider: Provider.optional(),
  /** Scales the demo's delays (tests run it faster); ACTORLOOP_DEMO_PACE. */
  pace: Pace.default(1),
});
export type DemoOptions = z.input<typeof DemoOptions>;

export interface DemoIO {
  out: Sink;
  tty: boolean;
  color: boolean;
  /** Registers the Ctrl-C handler; returns its removal. */
  onInterrupt(handler: () => void): () => void;
  /** Leaves at once (second Ctrl-C). */
  exitNow(code: number): void;
}

/**
 * `demo-20250611-101112-3f9a`: sortable, readable, typed back easily; the random tail keeps two
 * demos started in the same second (several processes may share a data dir) off each other's session.
 */
export function newSessionId(now = new Date()): string {
  const p = (n: number) => String(n).padStart(2, '0');
  const date = `${now.getFullYear()}${p(now.getMonth() + 1)}${p(now.getDate())}`;
  const time = `${p(now.getHours())}${p(now.getMinutes())}${p(now.getSeconds())}`;
  return `demo-${date}-${time}-${randomUUID().slice(0, 4)}`;
}

const shortId = () => randomUUID().slice(0, 8);

/**
 * `actorloop demo`: the demo agent on the LMDB data dir. A new session runs the demo prompt; an
 * existing one resumes its interrupted run (`continue` with a new attempt) or, when none is open,
 * runs the prompt again. Returns the exit code.
 */
export async function runDemo(options: DemoOptions, io: DemoIO): Promise<number> {
  const o = parseOptions(DemoOptions, options, 'demo');
  const s = styles(io.color);
  const say = (t: string): void => void io.out.write(`${t}\n`);
  const dataDir = dataDirOf(o.data);
  const provider = chooseProvider(o.provider);
  const model = await demoModel(provider, o.pace);
  const paths = demoPaths(dataDir);
  const store = openDemoStore(dataDir, o.postgres, () => prepareDemoFiles(paths));
  const tools = demoTools(paths, o.pace);

  let sessionId = o.session ?? newSessionId();
  if (!o.session) while ((await store.getHead(sessionId))?.lastSeq) sessionId = newSessionId();
  const existed = ((await store.getHead(sessionId))?.lastSeq ?? 0) > 0;
  if (existed) {
    const flag = o.postgres ? `--postgres ${redactUrl(o.postgres)}` : `--data ${dataDir}`;
    await refuseChildSession(store, sessionId, flag).catch(async (e: unknown) => {
      await store.close();
      throw e;
    });
  }
  const dataFlag = o.data && dataDirOf(o.data) !== dataDirOf(DEFAULT_DATA_DIR) ? ` --data ${o.data}` : '';
  const pgFlag = o.postgres ? ` --postgres ${redactUrl(o.postgres)}` : '';
  const resumeHint = command(`demo --session ${sessionId}${dataFlag}${pgFlag}`);

  const runtime = createRuntime({
    store,
    model,
    tools,
    systemPrompt: DEMO_SYSTEM_PROMPT,
    // Printing is harmless to repeat, so a final answer left undelivered by a crash is redelivered.
    delivery: {
      idempotent: true,
      deliver: async (final) => void say(`${s.green('delivered')} final answer ${s.dim(final.finalMessageId)}`),
    },
  });
  const log = o.postgres ? ` · log ${redactUrl(o.postgres)}` : '';
  say(`${s.bold('actorloop demo')} · session ${s.bold(sessionId)} · model ${model.modelId} (${provider}) · data ${dataDir}${log}`);
  if (!existed) say(s.dim(`resume or continue it later with: ${resumeHint}`));
  // npx (and tsx) start the demo as a child of their own process: killing their pid leaves it running
  say(s.dim(`demo pid ${process.pid}: to crash it, kill -9 ${process.pid} (killing npx's pid leaves the demo running)`));

  let session: ExecutionSession | undefined;
  let progress: Progress | undefined;
  let interrupts = 0;
  const offInterrupt = io.onInterrupt(() => {
    interrupts++;
    if (interrupts === 1 && session?.requestDetach()) {
      progress?.line(s.yellow(`Ctrl-C: detaching after the current step (Ctrl-C again to stop at once); resume with: ${resumeHint}`));
      return;
    }
    io.out.write(`\nstopped; the run is resumable with: ${resumeHint}\n`);
    io.exitNow(EXIT.interrupted);
  });

  try {
    try {
      session = await runtime.openSession(sessionId);
    } catch (e) {
      // errors, so one line on stderr starting with `actorloop:` (docs/cli.md)
      if (isSessionHeldError(e)) {
        const h = e.holder;
        throw new CliError(
          `cannot run: session ${sessionId} is being run by another live process (pid ${h.pid} on ${h.host}); ` +
            'run it again when that one is done',
          EXIT.failure,
        );
      }
      if (!isStaleWriterError(e)) throw e;
      throw new CliError(
        `cannot run: another process opened session ${sessionId} at the same moment and is its writer now; ` +
          'run it again when that one is done',
        EXIT.failure,
      );
    }
    if (existed) for (const l of describeRecovery(session.recovery)) say(l);
    progress = new Progress(io.out, { tty: io.tty, color: io.color, modes: new Map(tools.map((t) => [t.name, t.mode])) });
    const p = progress;
    session.subscribe((env) => p.onEnvelope(env), { name: 'cli-progress', capacity: 4096 });

    const open = session.recovery.interruptedRuns[0];
    let request: ExecutionRequest;
    if (open?.pendingRequest) {
      say(
        `run ${open.runId} waits for an answer (${JSON.stringify(open.pendingRequest)}); ` +
          `the demo agent asks no questions, so answer it from your own code with execute({ kind: 'respond', … }).`,
      );
      return EXIT.failure;
    } else if (open) {
      request = { kind: 'continue', runId: open.runId, attemptId: `a-${shortId()}` };
      say(`continuing run ${open.runId} with a new attempt ${request.attemptId}`);
    } else {
      request = { kind: 'prompt', runId: `r-${shortId()}`, attemptId: `a-${shortId()}`, message: DEMO_PROMPT };
      say(`${s.cyan('user')}: ${DEMO_PROMPT}`);
    }

    let result: ExecutionResult;
    try {
      result = await session.execute(request);
    } catch (e) {
      if (isValidationError(e) || isExecutionBusy(e)) {
        progress.stop();
        throw new CliError(`cannot run session ${sessionId}: ${e.message.replace(/\s*\n\s*/g, ' ')}`, EXIT.failure);
      }
      throw e;
    }
    progress.stop();
    say(summaryLine(result, s));
    if (result.error) say(`${s.red('error')} (${result.error.kind}): ${result.error.message}`);
    if (result.outcome !== 'completed') say(`resume with: ${resumeHint}`);
    say(`session: ${sessionId}`);
    if (result.outcome === 'completed') return EXIT.ok;
    return result.status === 'detached' && interrupts > 0 ? EXIT.interrupted : EXIT.failure;
  } finally {
    offInterrupt();
    progress?.stop();
    await runtime.close();
  }
}

function summaryLine(r: ExecutionResult, s: ReturnType<typeof styles>): string {
  const colour = r.outcome === 'completed' ? s.green : r.outcome === 'failed' ? s.red : s.yellow;
  const extra = [
    `status ${r.status}`,
    `${r.steps} step${r.steps === 1 ? '' : 's'}`,
    `${r.usage.inputTokens} in / ${r.usage.outputTokens} out tokens`,
    ...(r.budget ? [`budget ${r.budget}`] : []),
    ...(r.blockedBy?.length ? [`blocked by ${r.blockedBy.join(', ')}`] : []),
  ];
  return `outcome: ${colour(r.outcome)} (${extra.join(', ')})`;
}
