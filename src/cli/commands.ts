import { statSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { isCorruptLogError } from '../contracts/errors.js';
import type { EventRecord } from '../contracts/events.js';
import type { EventStore } from '../persistence/event-store.js';
import { SessionId, openSource, readAll, requireSession, withStore } from './data.js';
import { EXIT, parseArg } from './errors.js';
import { formatLine } from './format.js';
import type { Sink } from './progress.js';
import { command } from './invocation.js';
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
/** `view -o FILE`: a path to a file (a directory there is refused before anything is read). */
const OutputFile = z
  .string()
  .min(1, 'a file path is required')
  .refine((f) => !statSync(f, { throwIfNoEntry: false })?.isDirectory(), 'a file to write, not a directory');

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

/** `actorloop view <session>`: writes the session's timeline as one self-contained HTML file. */
export async function viewCommand(
  sessionId: string,
  opts: { data?: string; postgres?: string; output?: string },
  io: CommandIO,
): Promise<number> {
  const id = parseArg(SessionId, sessionId, 'session');
  const output = resolve(
    opts.output === undefined ? `${id.replace(/[^A-Za-z0-9._-]/g, '_')}.timeline.html` : parseArg(OutputFile, opts.output, '--output'),
  );
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
