import type { FinalAnswer } from '../contracts/hooks.js';
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { createRuntime } from '../runtime/runtime.js';
import { previewRecovery } from '../runtime/recovery-preview.js';
import { isCorruptLogError } from '../contracts/errors.js';
import type { EventRecord } from '../contracts/events.js';
import type { EventStore } from '../persistence/event-store.js';
import { scriptedModel } from '../providers/scripted.js';
import { childSessionRoot, refuseChildSession } from './child-session.js';
import { SessionId, dataDirOf, openSource, readAll, requireSession, withStore } from './data.js';
import { demoPaths, demoTools } from './demo-tools.js';
import { CliError, EXIT, parseArg } from './errors.js';
import { formatLine } from './format.js';
import type { Sink } from './progress.js';
import { describeHold, describeRecovery, holderName } from './recovery.js';
import { command } from './invocation.js';
import { liveHolderOf, liveLeaseOf } from './session-lease.js';
import { renderTimeline } from './timeline.js';
import { childLanes, readChildTimelines } from './timeline-children.js';

export interface CommandIO {
  out: Sink;
  err: Sink;
  /** Registers a Ctrl-C handler; returns its removal. */
  onInterrupt(handler: () => void): () => void;
}

const Seq = z.string().regex(/^\d+$/, 'a whole number such as 12').transform(Number).pipe(z.number().int().positive('1 or more'));
const say = (io: CommandIO, text: string) => io.out.write(`${text}\n`);

/** `actorloop sessions`: every session with its head (events, turns, writer epoch, open run). */
export async function sessionsCommand(opts: { data?: string; postgres?: string; json?: boolean }, io: CommandIO): Promise<number> {
  const src = openSource(opts);
  const dir = src.where;
  return withStore(src.store, async (store) => {
    const rows = [];
    for (const id of await store.listSessions()) {
      const h = await store.getHead(id);
      if (!h) continue;
      rows.push({
        sessionId: id,
        events: h.lastSeq,
        turns: h.lastTurn,
        writerEpoch: h.writerEpoch,
        openRun: h.openRun?.runId ?? null,
        pendingInputs: h.pendingInputs.length,
      });
    }
    if (opts.json) {
      say(io, JSON.stringify(rows));
      return EXIT.ok;
    }
    if (rows.length === 0) {
      say(io, `no sessions in ${dir}`);
      return EXIT.ok;
    }
    const w = Math.max(7, ...rows.map((r) => r.sessionId.length));
    say(io, `${'session'.padEnd(w)}  events  turns  epoch  state`);
    for (const r of rows) {
      const state = r.openRun ? `open run ${r.openRun} (resumable)` : 'idle';
      say(
        io,
        `${r.sessionId.padEnd(w)}  ${String(r.events).padStart(6)}  ${String(r.turns).padStart(5)}  ` +
          `${String(r.writerEpoch).padStart(5)}  ${state}${r.pendingInputs ? `, ${r.pendingInputs} queued input(s)` : ''}`,
      );
    }
    return EXIT.ok;
  });
}

/** `actorloop log <session>`: the log from `--from`, one line per event or JSON lines. */
export async function logCommand(
  sessionId: string,
  opts: { data?: string; postgres?: string; from?: string; json?: boolean },
  io: CommandIO,
): Promise<number> {
  const from = opts.from === undefined ? 1 : parseArg(Seq, opts.from, '--from');
  const src = openSource(opts);
  return withStore(src.store, async (store) => {
    await requireSession(store, src, sessionId);
    await printFrom(store, sessionId, from, opts.json ?? false, io);
    return EXIT.ok;
  });
}

/**
 * `actorloop tail <session>`: prints the last events, then follows appends made by any process
 * by polling `readEvents` from the last seq seen. Stops on Ctrl-C (exit 0).
 */
export async function tailCommand(
  sessionId: string,
  opts: { data?: string; postgres?: string; from?: string; json?: boolean; intervalMs?: number },
  io: CommandIO,
): Promise<number> {
  const explicitFrom = opts.from === undefined ? undefined : parseArg(Seq, opts.from, '--from');
  const interval = opts.intervalMs ?? 200;
  const src = openSource(opts);
  const dir = src.where;
  return withStore(src.store, async (store) => {
    const head = await requireSession(store, src, sessionId);
    let next = explicitFrom ?? Math.max(1, head.lastSeq - 9);
    let stopped = false;
    let wake: (() => void) | undefined;
    const off = io.onInterrupt(() => {
      stopped = true;
      wake?.();
    });
    try {
      io.err.write(`following ${sessionId} in ${dir} (Ctrl-C to stop)\n`);
      while (!stopped) {
        next = await printFrom(store, sessionId, next, opts.json ?? false, io);
        await new Promise<void>((res) => {
          wake = res;
          setTimeout(res, interval);
        });
      }
      return EXIT.ok;
    } finally {
      off();
    }
  });
}

/**
 * Prints the events from `fromSeq` on and returns the next seq. At a corrupt record, the intact
 * records before it (which the store reads a page at a time) are printed before the error.
 */
async function printFrom(store: EventStore, sessionId: string, fromSeq: number, json: boolean, io: CommandIO): Promise<number> {
  let next = fromSeq;
  const print = (e: EventRecord) => {
    say(io, json ? JSON.stringify(e) : formatLine(e));
    next = e.seq + 1;
  };
  try {
    for await (const e of store.readEvents(sessionId, { fromSeq })) print(e);
  } catch (err) {
    if (isCorruptLogError(err) && err.sessionId === sessionId && err.seq > next) {
      for await (const e of store.readEvents(sessionId, { fromSeq: next, toSeq: err.seq - 1 })) print(e);
    }
    throw err;
  }
  return next;
}

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
  const store = src.store;
  const tools = demoTools(demoPaths(dir));
  if (!opts.resume) {
    return withStore(store, async () => {
      await requireSession(store, src, sessionId);
      // the CLI knows the demo's tools, not the app's agents: an agent call is resumed by the runtime that defines them
      const preview = await previewRecovery(store, sessionId, tools, { agentsDefined: true });
      // a live process running the session, or a serving worker's lease: named, so an open run is not taken for a stopped one
      const [holder, lease] = await Promise.all([liveHolderOf(store, sessionId), liveLeaseOf(store, sessionId)]);
      say(io, JSON.stringify(preview, null, 2));
      const lines = describeRecovery(preview, holder ? { runningIn: holderName(holder) } : {});
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
  try {
    await requireSession(store, src, sessionId);
    await refuseChildSession(store, sessionId, src.flag);
    const lease = await liveLeaseOf(store, sessionId);
    if (lease && !opts.force) {
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
  io.err.write(
    `resuming: attaching a new writer to session ${sessionId}; ` +
      `a process still running it is fenced (its run ends fenced, its next write fails with a stale epoch)\n`,
  );
  // Opening settles a final answer committed but never delivered: like the demo, the CLI is its
  // (idempotent) delivery owner and prints it.
  const delivery = {
    idempotent: true,
    deliver: async (f: FinalAnswer) => void io.err.write(`redelivered final answer ${f.finalMessageId}: ${f.content}\n`),
  };
  const runtime = createRuntime({ store, model: scriptedModel([], { modelId: 'none' }), tools, delivery });
  try {
    const session = await runtime.openSession(sessionId, { takeover: true }); // said above: a live writer is fenced
    say(io, JSON.stringify(session.recovery, null, 2));
    for (const l of describeRecovery(session.recovery)) io.err.write(`${l}\n`);
    return EXIT.ok;
  } finally {
    await runtime.close();
  }
}

/** `actorloop view <session>`: writes the session's timeline as one self-contained HTML file. */
export async function viewCommand(
  sessionId: string,
  opts: { data?: string; postgres?: string; output?: string },
  io: CommandIO,
): Promise<number> {
  const id = parseArg(SessionId, sessionId, 'session');
  const output = resolve(opts.output ?? `${id.replace(/[^A-Za-z0-9._-]/g, '_')}.timeline.html`);
  const src = openSource(opts);
  return withStore(src.store, async (store) => {
    await requireSession(store, src, id);
    const events = await readAll(store, id);
    const children = await readChildTimelines(store, id, events);
    writeFileSync(output, renderTimeline(events, { sessionId: id, children, childView: { command: command('view'), flag: src.flag } }));
    const n = childLanes(children).length; // grandchildren included
    const nested = n ? `, ${n} child session${n === 1 ? ' drawn under its call' : 's drawn under their calls'}` : '';
    say(io, `wrote ${output} (${events.length} events${nested}): open ${pathToFileURL(output).href} in a browser`);
    return EXIT.ok;
  });
}
