import { createInspector } from '@statelyai/inspect';
import type { InspectionEvent } from 'xstate';
import { describe, expect, it } from 'vitest';
import { localAdapter, runInspectedAgent } from '../../examples/inspector.js';

/** The machine behind an inspected actor (callback actors have no machine config). */
const machineOf = (e: InspectionEvent) => (e.actorRef as unknown as { logic?: { id?: string; config?: unknown } }).logic;

describe('the runtime inspect option', () => {
  it('receives snapshots of the session, run and toolBatch machines', async () => {
    const snapshots = new Map<string, unknown[]>();
    const outcome = await runInspectedAgent((e) => {
      const logic = machineOf(e);
      if (e.type !== '@xstate.snapshot' || !logic?.config || !logic.id) return;
      snapshots.set(logic.id, [...(snapshots.get(logic.id) ?? []), (e.snapshot as { value?: unknown }).value]);
    });
    expect(outcome).toBe('completed');
    expect([...snapshots.keys()].sort()).toEqual(['run', 'session', 'toolBatch']);
    expect(snapshots.get('session')).toContain('executing');
    expect(snapshots.get('run')).toEqual(expect.arrayContaining(['callingModel', 'committingIntent', 'runningTools', 'committingResults', 'verifyingFinal', 'delivering', 'done']));
    expect(snapshots.get('toolBatch')).toContain('done');
    expect(snapshots.get('toolBatch')!.some((v) => String(v).startsWith('running'))).toBe(true);
  });

  it('feeds @statelyai/inspect: the example adapter gets snapshots of all three machines', async () => {
    const adapter = localAdapter();
    const inspector = createInspector(adapter);
    await runInspectedAgent((e) => inspector.inspect.next?.(e));
    // the inspector converts each event on a later tick
    await expect.poll(() => adapter.snapshotsByMachine.get('toolBatch') ?? 0).toBeGreaterThan(0);
    inspector.stop();
    for (const machine of ['session', 'run', 'toolBatch']) expect(adapter.snapshotsByMachine.get(machine), machine).toBeGreaterThan(0);
  });
});
