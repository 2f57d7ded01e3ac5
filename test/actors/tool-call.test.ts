import { describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import type { SessionServices } from '../../src/actors/session-services.js';
import { toolCallActor } from '../../src/actors/tool-call.js';
import { deferred } from '../helpers/drafts.js';
import { systemClock } from '../../src/contracts/clock.js';
import { isCancelledError } from '../../src/contracts/errors.js';

/** Just what a tool-call actor reaches of the session's environment. */
function fakeEnv(checkFenced: () => Promise<boolean>, execute: (args: unknown, ctx: { signal: AbortSignal }) => Promise<string>) {
  const tool = { name: 'pay', mode: 'exclusive', execute };
  return {
    sessionId: 's1',
    tools: new Map([['pay', tool]]),
    writer: { checkFenced },
    clock: systemClock,
    config: { cancelGraceMs: 50 },
    emit: () => {},
    callSeqs: new Map(),
  } as unknown as SessionServices;
}

const input = { runId: 'r1', index: 0, call: { callId: 'c1', name: 'pay', arguments: {}, mode: 'exclusive' as const, resources: [], idempotencyKey: 's1/r1/c1' } };

describe('toolCallActor', () => {
  it('a call stopped while its fence check is pending never starts its tool', async () => {
    const fence = deferred<boolean>();
    const started: unknown[] = [];
    const actor = createActor(toolCallActor(fakeEnv(() => fence.promise, async (a) => (started.push(a), 'paid'))), { input }).start();
    actor.stop();
    fence.resolve(false);
    await new Promise((r) => setTimeout(r, 10));
    expect(started).toEqual([]);
  });

  it('a stopped call aborts its running tool with an AbortError', async () => {
    const reason = deferred<unknown>();
    const execute = (_: unknown, { signal }: { signal: AbortSignal }) =>
      new Promise<string>((_, reject) => signal.addEventListener('abort', () => (reason.resolve(signal.reason), reject(signal.reason)), { once: true }));
    const actor = createActor(toolCallActor(fakeEnv(async () => false, execute)), { input }).start();
    await new Promise((r) => setTimeout(r, 5));
    actor.stop();
    expect(await reason.promise).toMatchObject({ name: 'AbortError' });
  });
});

describe('toolCallActor signal', () => {
  it('a tool that first reads its signal after the call was cancelled sees it aborted, with the reason', async () => {
    const seen = deferred<{ aborted: boolean; reason: unknown }>();
    const release = deferred<void>();
    const execute = async (_: unknown, ctx: { signal: AbortSignal }) => {
      await release.promise;
      seen.resolve({ aborted: ctx.signal.aborted, reason: ctx.signal.reason });
      return 'late';
    };
    const actor = createActor(toolCallActor(fakeEnv(async () => false, execute)), { input }).start();
    await new Promise((r) => setTimeout(r, 5));
    actor.send({ type: 'CANCEL', reason: 'requestCancel' });
    release.resolve();
    const got = await seen.promise;
    expect(got.aborted).toBe(true);
    expect(isCancelledError(got.reason)).toBe(true);
    expect((got.reason as Error).message).toBe('requestCancel');
  });
});

describe('toolCallActor context', () => {
  it('a tool that copies its context ({ ...ctx }) keeps a live signal', async () => {
    const got = deferred<AbortSignal | undefined>();
    const execute = async (_: unknown, ctx: { signal: AbortSignal }) => {
      const copy = { ...ctx };
      got.resolve(copy.signal);
      return 'ok';
    };
    createActor(toolCallActor(fakeEnv(async () => false, execute)), { input }).start();
    const signal = await got.promise;
    expect(signal).toBeInstanceOf(AbortSignal);
    expect(signal!.aborted).toBe(false);
  });
});
