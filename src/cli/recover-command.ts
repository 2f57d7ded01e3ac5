import type { FinalAnswer } from '../contracts/hooks.js';
import type { EventStore } from '../persistence/event-store.js';
import { scriptedModel } from '../providers/scripted.js';
import { previewRecovery } from '../runtime/recovery-preview.js';
import { createRuntime } from '../runtime/runtime.js';
import type { AnyTool } from '../tools/define-tool.js';
import { childSessionRoot, refuseChildSession } from './child-session.js';
import type { CommandIO } from './commands.js';
import { dataDirOf, openSource, requireSession, withStore, type StoreSource } from './data.js';
import { demoPaths, demoTools } from './demo-tools.js';
import { CliError, EXIT } from './errors.js';
import { command } from './invocation.js';
import { describeHold, describeRecovery, holderName } from './recovery.js';
import { liveHolderOf, liveLeaseOf } from './session-lease.js';

const say = (io: CommandIO, text: string) => io.out.write(`${text}\n`);

/**
 * `actorloop recover <session>`: what opening the session would find, as JSON, read from the log
 * alone (no writer attaches, nothing is written, a live process running the session is not
 * disturbed). With `resume`: opens the session — attaching a new writer, which fences any process
 * still running it — and settles what opening settles (an undelivered final answer is printed as
 * redelivered); refused while a serving worker's unexpired lease holds the session unless `force`.
 * Runs no tool and no model call. The CLI knows the demo agent's tools, so reconcile-able calls are
 * those of the demo.
 */
export async function recoverCommand(
  sessionId: string,
  opts: { data?: string; postgres?: string; resume?: boolean; force?: boolean },
  io: CommandIO,
): Promise<number> {
  const src = openSource(opts);
  // the demo's tools keep their files in the data dir (the default one beside a PostgreSQL log)
  const dir = opts.postgres === undefined ? src.where : dataDirOf(undefined);
  const tools = demoTools(demoPaths(dir));
  return opts.resume ? resume(sessionId, src, tools, opts.force ?? false, io) : preview(sessionId, src, tools, io);
}

/** The read-only preview: the JSON on stdout, the summary and who holds the session on stderr. */
function preview(sessionId: string, src: StoreSource, tools: AnyTool[], io: CommandIO): Promise<number> {
  return withStore(src.store, async (store) => {
    await requireSession(store, src, sessionId);
    // the CLI knows the demo's tools, not the app's agents: an agent call is resumed by the runtime that defines them
    const outcome = await previewRecovery(store, sessionId, tools, { agentsDefined: true });
    // a live process running the session, or a serving worker's lease: named, so an open run is not taken for a stopped one
    const [holder, lease] = await Promise.all([liveHolderOf(store, sessionId), liveLeaseOf(store, sessionId)]);
    say(io, JSON.stringify(outcome, null, 2));
    const lines = describeRecovery(outcome, holder ? { runningIn: holderName(holder) } : {});
    for (const l of lines) io.err.write(`${l.replace(/^recovery found:/, 'recovery would find:')}\n`);
    // a child session is taken over through its root (`--resume` and `demo --session` refuse its own id)
    const child = await childSessionRoot(store, sessionId);
    const hints = child
      ? { resume: `recover ${child.root} ${src.flag} --resume` }
      : { resume: `recover ${sessionId} ${src.flag} --resume`, demo: `demo --session ${sessionId} ${src.flag}` };
    for (const l of describeHold(sessionId, holder, lease, hints)) io.err.write(`${l}\n`);
    io.err.write(
      `read only: nothing was attached or written. ` +
        (child
          ? `a child session is resumed through its root session ${child.root}: ` +
            `to take it over, ${command(hints.resume)} (fences a process still running it)\n`
          : `To take the session over and settle it: ${command(hints.resume)} (fences a process still running it)\n`),
    );
    return EXIT.ok;
  });
}

/** `--resume`: opens the session (a new writer, fencing a live one), says so once it has, and prints `session.recovery`. */
async function resume(sessionId: string, src: StoreSource, tools: AnyTool[], force: boolean, io: CommandIO): Promise<number> {
  const store: EventStore = src.store;
  try {
    await requireSession(store, src, sessionId);
    await refuseChildSession(store, sessionId, src.flag);
    const lease = await liveLeaseOf(store, sessionId);
    if (lease && !force) {
      throw new CliError(
        `session ${sessionId} is held by serving worker ${lease.workerId} (lease until ${lease.leaseUntil ?? 'unknown'}); ` +
          `resuming would fence it mid-run. Stop that worker or let its lease expire, or pass --force`,
        EXIT.failure,
      );
    }
  } catch (e) {
    await store.close();
    throw e;
  }
  // Opening settles a final answer committed but never delivered: like the demo, the CLI is its
  // (idempotent) delivery owner and prints it (after the line saying the writer attached).
  const redelivered: string[] = [];
  const flush = () => void io.err.write(redelivered.splice(0).join(''));
  const delivery = {
    idempotent: true,
    deliver: async (f: FinalAnswer) => void redelivered.push(`redelivered final answer ${f.finalMessageId}: ${f.content}\n`),
  };
  const runtime = createRuntime({ store, model: scriptedModel([], { modelId: 'none' }), tools, delivery });
  try {
    // takeover: a live writer is fenced (docs/cli.md); said once it is done, as a refused open attaches nothing
    const session = await runtime.openSession(sessionId, { takeover: true }).catch((e: unknown) => {
      flush();
      throw e;
    });
    io.err.write(
      `resumed: attached a new writer to session ${sessionId} (writer epoch ${session.recovery.writerEpoch}); ` +
        `a process still running it is fenced (its run ends fenced, its next write fails with a stale epoch)\n`,
    );
    flush();
    say(io, JSON.stringify(session.recovery, null, 2));
    for (const l of describeRecovery(session.recovery)) io.err.write(`${l}\n`);
    return EXIT.ok;
  } finally {
    await runtime.close();
  }
}
