import { afterEach, describe, expect, it, vi } from 'vitest';
import type { CommandIO } from '../../src/cli/commands.js';
import { workersCommand } from '../../src/cli/workers.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { tempDir } from '../helpers/tmp.js';

// `actorloop workers` lists the serving workers, their leases and the sessions with work waiting.

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

function capture(): CommandIO & { out: { text: string } } {
  const out = { text: '', write: (s: string) => ((out.text += s), true) };
  const err = { text: '', write: (_s: string) => true };
  return { out, err, onInterrupt: () => () => {} };
}

describe('actorloop workers', () => {
  it('lists live workers with the sessions they hold, and sessions whose inbox waits', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const store = lmdbStore({ path: dir.path });
    const w = store.work!;
    await w.heartbeat({ workerId: 'w-1', host: 'box', pid: 123, concurrency: 8 }, 60_000);
    await w.submit('held', { kind: 'input', inputId: 'i', mode: 'follow_up', message: 'x' });
    await w.claim('w-1', { limit: 1, leaseMs: 60_000 });
    const { writerEpoch } = await store.attachWriter('held');
    await w.bind('held', 'w-1', writerEpoch, 60_000);
    await w.submit('waiting', { kind: 'cancel', entryId: 'c' });
    await store.close();

    const io = capture();
    expect(await workersCommand({ data: dir.path }, io)).toBe(0);
    expect(io.out.text).toMatch(/w-1\s+live\s+box:123\s+1\/8/);
    expect(io.out.text).toMatch(/held\s+w-1 epoch 1 until \S+, 1 inbox entry waiting/);
    expect(io.out.text).toMatch(/waiting\s+none, 1 inbox entry waiting/);

    const json = capture();
    expect(await workersCommand({ data: dir.path, json: true }, json)).toBe(0);
    const parsed = JSON.parse(json.out.text) as {
      workers: { workerId: string; live: boolean }[];
      leases: { sessionId: string; workerId: string | null }[];
    };
    expect(parsed.workers).toMatchObject([{ workerId: 'w-1', live: true }]);
    expect(parsed.leases.map((l) => [l.sessionId, l.workerId])).toEqual([
      ['held', 'w-1'],
      ['waiting', null],
    ]);
  });

  it('hides workers gone for more than an hour unless --all', async () => {
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const store = lmdbStore({ path: dir.path });
    const w = store.work!;
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(Date.now() - 2 * 60 * 60 * 1000);
      await w.heartbeat({ workerId: 'w-old', host: 'box', pid: 1, concurrency: 8 }, 15_000);
      vi.setSystemTime(Date.now() + 2 * 60 * 60 * 1000 - 60_000);
      await w.heartbeat({ workerId: 'w-recent', host: 'box', pid: 2, concurrency: 8 }, 15_000);
    } finally {
      vi.useRealTimers();
    }
    await w.heartbeat({ workerId: 'w-live', host: 'box', pid: 3, concurrency: 8 }, 60_000);
    await store.close();

    const io = capture();
    expect(await workersCommand({ data: dir.path }, io)).toBe(0);
    expect(io.out.text).toMatch(/w-live\s+live/);
    expect(io.out.text).toMatch(/w-recent\s+gone/);
    expect(io.out.text).not.toContain('w-old');
    expect(io.out.text).toContain('1 worker gone for more than an hour not shown');
    const all = capture();
    expect(await workersCommand({ data: dir.path, all: true }, all)).toBe(0);
    expect(all.out.text).toMatch(/w-old\s+gone/);
    const json = capture();
    expect(await workersCommand({ data: dir.path, json: true }, json)).toBe(0);
    expect((JSON.parse(json.out.text) as { workers: { workerId: string }[] }).workers.map((x) => x.workerId)).toEqual([
      'w-live',
      'w-recent',
    ]);
  });
});
