import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { EventRecord } from '../../src/contracts/events.js';
import { addDecimal, decimalAtLeast, subDecimal } from '../../src/contracts/budget.js';
import { lmdbStore } from '../../src/persistence/lmdb-store.js';
import { collect } from '../helpers/drafts.js';
import { tempDir } from '../helpers/tmp.js';
import { killAllChildren, REPO_ROOT, spawnTs } from './child-util.js';
import { tokenPrice } from './budget-pricing.js';

/**
 * Crash-safe budgets (docs/guarantees.md, "Budgets"), with real processes on a real LMDB log
 * (test/crash/budget-child.ts): a call whose usage never came back counts at its reservation.
 */
const CHILD = join(REPO_ROOT, 'test/crash/budget-child.ts');

afterEach(killAllChildren);

async function life(phase: 'first' | 'recover', dir: string) {
  const child = spawnTs(CHILD, [phase, dir], { label: `budget-child ${phase}` });
  await child.waitExit(60_000);
  expect(
    child.lines.filter((l) => l.startsWith('ERROR')),
    child.describe(),
  ).toEqual([]);
  return child;
}

async function logOf(dir: string): Promise<EventRecord[]> {
  const store = lmdbStore({ path: join(dir, 'db') });
  try {
    return await collect(store.readEvents('s'));
  } finally {
    await store.close();
  }
}

describe('crash-safe budgets (real child process, SIGKILL, LMDB)', () => {
  it('a SIGKILL mid-stream leaves the reservation counted after recovery, and a failed attempt that had output counts its reservation', async () => {
    const dir = tempDir();
    try {
      const first = await life('first', dir.path);
      expect(first.exit?.signal, first.describe()).toBe('SIGKILL');
      expect(first.lines, first.describe()).toContain('KILL mid-stream');
      const recover = await life('recover', dir.path);
      expect(recover.lines, recover.describe()).toContain('DONE');
      const result = JSON.parse(recover.lines.find((l) => l.startsWith('RESULT '))!.slice(7)) as {
        status: string;
        cost: string;
        spending: { maxCost: { limit: string; spent: string; reserved: string; remaining: string } };
      };
      const log = await logOf(dir.path);
      // the retried attempt: counted at its reservation (it failed after output)
      const attempt = log.find((e) => e.type === 'assistant/attempt')!.payload as { counted: string; reserved: { cost: string } };
      expect(attempt.counted).toBe('reservation');
      // the continue's run/start records the reservation of the killed call (never zero)
      const starts = log.filter((e) => e.type === 'run/start').map((e) => e.payload as { recoveredReservation?: { cost: string } });
      expect(starts.map((s) => s.recoveredReservation !== undefined)).toEqual([false, true]);
      const recovered = starts[1]!.recoveredReservation!.cost;
      expect(decimalAtLeast(recovered, '0.0001')).toBe(true);
      // the run's ledger: every reported usage priced, plus what is counted at reservation
      const priced = log
        .filter((e) => e.type === 'assistant/message')
        .reduce(
          (sum, e) => addDecimal(sum, tokenPrice((e.payload as { usage: { inputTokens: number; outputTokens: number } }).usage)),
          '0',
        );
      const reserved = addDecimal(attempt.reserved.cost, recovered);
      expect(result).toMatchObject({
        status: 'succeeded',
        cost: priced,
        spending: { maxCost: { limit: '1', spent: priced, reserved, remaining: subDecimal('1', addDecimal(priced, reserved)) } },
      });
      expect(decimalAtLeast('1', addDecimal(priced, reserved))).toBe(true);
    } finally {
      await dir.cleanup();
    }
  }, 120_000);
});
