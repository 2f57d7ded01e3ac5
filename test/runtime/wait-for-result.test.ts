import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { createRuntime, memoryStore, scriptedModel, type Runtime } from '../../src/index.js';
import { isCancelledError } from '../../src/contracts/errors.js';
import { within } from '../helpers/runtime.js';

// runtime.waitForResult(sessionId, runId, { signal, pollMs }): an abort ends the wait at once,
// wherever the wait stands (reading the log or waiting for the next append).

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function make(): Promise<Runtime> {
  const runtime = createRuntime({ store: memoryStore(), model: scriptedModel(['hi'], { loop: true }) });
  cleanups.push(() => runtime.close());
  await (await runtime.openSession('s1')).run('x').result;
  return runtime;
}

describe('waitForResult', () => {
  it('an abort that lands while it reads the log ends the wait at once, not after pollMs', async () => {
    const runtime = await make();
    const slow: number[] = [];
    for (let n = 0; n < 40; n++) {
      const ac = new AbortController();
      const wait = runtime.waitForResult('s1', `never-${n}`, { signal: ac.signal, pollMs: 600_000 });
      let k = 0;
      const tick = () => (k++ < n ? queueMicrotask(tick) : ac.abort());
      tick();
      const out = await within(
        wait.then(
          () => 'resolved',
          (e: unknown) => (isCancelledError(e) ? 'cancelled' : e),
        ),
        1000,
      );
      if (out !== 'cancelled') slow.push(n);
    }
    expect(slow).toEqual([]);
  });

  it('waits sharing one signal add one abort listener to it, removed when they end (no MaxListenersExceededWarning)', async () => {
    const runtime = await make();
    const ac = new AbortController();
    const waits = Array.from({ length: 30 }, (_, i) =>
      runtime.waitForResult('s1', `m${i}`, { signal: ac.signal, pollMs: 600_000 }).catch((e: unknown) => e),
    );
    await new Promise((r) => setTimeout(r, 50));
    expect(getEventListeners(ac.signal, 'abort').length).toBe(1);
    ac.abort();
    expect((await Promise.all(waits)).every(isCancelledError)).toBe(true);
    expect(getEventListeners(ac.signal, 'abort').length).toBe(0);
    // a wait that ends with a result leaves no listener behind either
    const kept = new AbortController();
    const run = await runtime.openSession('s1').then((s) => s.run('y').result);
    await runtime.waitForResult('s1', run.runId, { signal: kept.signal, pollMs: 600_000 });
    expect(getEventListeners(kept.signal, 'abort').length).toBe(0);
  });
});
