import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { lmdbStore } from '../../src/index.js';
import { spawnTs } from '../crash/child-util.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';

const AGENT = 'test/actors/fixtures/approval-agent.ts';

async function run(args: string[]) {
  const child = spawnTs(AGENT, args, { label: args[0] });
  const exit = await child.waitExit(60_000);
  expect(exit.code, child.stderr).toBe(0);
  return JSON.parse(child.lines.find((l) => l.startsWith('{'))!) as { result: Record<string, any> };
}

describe('a suspended run survives its process', () => {
  it('suspends in one process and is approved from a fresh one', async () => {
    const dir = tempDir();
    const first = await run(['suspend', dir.path]);
    expect(first.result).toMatchObject({ status: 'suspended', pendingRequest: { kind: 'approval', calls: [{ callId: 'p1' }] } });
    expect(existsSync(join(dir.path, 'ledger'))).toBe(false);
    const second = await run(['respond', dir.path, first.result.pendingRequest.questionId]);
    expect(second.result).toMatchObject({ status: 'succeeded', finalMessage: 'payment done' });
    expect(readFileSync(join(dir.path, 'ledger'), 'utf8')).toBe('shop/order/1/p1 42\n');
    const store = lmdbStore({ path: dir.path });
    const types = (await collect(store.readEvents('shop'))).map((e) => e.type);
    expect(types.filter((t) => t === 'session/attached')).toHaveLength(2);
    expect(types).toContain('approval/decided');
    await store.close();
    await dir.cleanup();
  });
});

describe('a detached run continues in a new process', () => {
  it('detaches at a safe point in one process and completes with continue in another', async () => {
    const dir = tempDir();
    const agent = 'test/actors/fixtures/detach-agent.ts';
    const runChild = async (args: string[]) => {
      const child = spawnTs(agent, args, { label: args[0] });
      const exit = await child.waitExit(60_000);
      expect(exit.code, child.stderr).toBe(0);
      return JSON.parse(child.lines.find((l) => l.startsWith('{'))!) as {
        result: Record<string, any>;
        recovery: Record<string, any>;
        requests: number;
      };
    };
    const first = await runChild(['detach', dir.path]);
    expect(first.result).toMatchObject({ outcome: 'incomplete', status: 'detached', steps: 1 });
    const second = await runChild(['continue', dir.path]);
    expect(second.recovery).toMatchObject({
      interruptedRuns: [{ runId: 'job', runEpoch: 1, lastStatus: 'detached' }],
      uncertainToolCalls: [],
    });
    expect(second.result).toMatchObject({ status: 'succeeded', finalMessage: 'all steps done' });
    const store = lmdbStore({ path: dir.path });
    const events = await collect(store.readEvents('work'));
    expect(events.filter((e) => e.type === 'run/start').map((e) => [e.payload.kind, e.payload.runEpoch])).toEqual([
      ['prompt', 1],
      ['continue', 2],
    ]);
    expect(events.filter((e) => e.type === 'step/start').map((e) => e.step)).toEqual([1, 2, 3]);
    await store.close();
    await dir.cleanup();
  });
});
