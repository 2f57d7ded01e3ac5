import type { EventDraft } from '../../src/contracts/events.js';

export const userMsg = (content: string, turn = 1, step = 1): EventDraft => ({
  type: 'user/message',
  turn,
  step,
  attempt: 1,
  surfaceOp: 'append',
  payload: { message: { role: 'user', content } },
});

export const stepStart = (turn = 1, step = 1): EventDraft => ({
  type: 'step/start',
  turn,
  step,
  attempt: 1,
  surfaceOp: 'none',
  payload: {},
});

export const compaction = (summary: string, replacedThroughSeq: number): EventDraft => ({
  type: 'compaction',
  turn: 1,
  step: 1,
  attempt: 1,
  surfaceOp: 'epoch',
  payload: { summary: { role: 'user', content: summary }, replacedThroughSeq },
});

export function deferred<T = void>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

export async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}
