import { z } from 'zod';
import { ValidationError } from '../contracts/errors.js';
import type { Frame } from './wire.js';

const encoder = new TextEncoder();

/** One SSE event: `event:` the frame's kind, `id:` when given, `data:` its JSON on one line. */
export function sseFrame(frame: Frame, id?: number): Uint8Array {
  return encoder.encode(`event: ${frame.kind}\n${id !== undefined ? `id: ${id}\n` : ''}data: ${JSON.stringify(frame)}\n\n`);
}

export const sseComment = (text: string): Uint8Array => encoder.encode(`: ${text}\n\n`);
export const sseRetry = (ms: number): Uint8Array => encoder.encode(`retry: ${ms}\n\n`);

const Position = z
  .string()
  .regex(/^\d{1,15}$/, 'a log position: a whole number ≥ 0')
  .transform(Number);

/**
 * The first seq a request asks for (the cursor rule): `Last-Event-ID: N` (what a browser's
 * EventSource sends on reconnect, the last event it received) resumes at N + 1; else
 * `?fromSeq=N` starts at N (as `store.events$` does); else the log's start. `Last-Event-ID` wins
 * over `fromSeq` because a reconnecting EventSource repeats the URL it was opened with.
 * Throws a ValidationError for a malformed value.
 */
export function cursorOf(request: Request): number {
  const last = request.headers.get('last-event-id');
  if (last !== null && last.trim() !== '') {
    const r = Position.safeParse(last.trim());
    if (!r.success)
      throw new ValidationError('sessionEvents', [
        { path: ['Last-Event-ID'], message: `${JSON.stringify(last.slice(0, 40))} is not a log position (a whole number ≥ 0)` },
      ]);
    return r.data + 1;
  }
  const from = new URL(request.url).searchParams.get('fromSeq');
  if (from !== null) {
    const r = Position.safeParse(from);
    if (!r.success || r.data < 1)
      throw new ValidationError('sessionEvents', [
        { path: ['fromSeq'], message: `${JSON.stringify(from.slice(0, 40))} is not a log position (a whole number ≥ 1)` },
      ]);
    return r.data;
  }
  return 1;
}
