import { describe, expect, it } from 'vitest';
import { runInspectedWorker } from '../../examples/worker-inspector.js';
import { stateTrace } from '../../examples/state-trace.js';
import { headerTraces, passesThrough, printedTraces } from '../helpers/header-traces.js';

describe("the runtime inspect option shows a serving worker's machines", () => {
  it('the worker registers, serves and stops; each claim is a held session from opening to released', async () => {
    const trace = stateTrace();
    const { events, outcomes } = await runInspectedWorker(trace.inspect);
    expect(outcomes).toEqual(['completed', 'completed']);
    expect(events.filter((e) => e === 'claimed' || e === 'released')).toEqual(['claimed', 'released', 'claimed', 'released']);

    const [worker, ...moreWorkers] = trace.of('worker');
    expect(moreWorkers).toEqual([]);
    expect(worker!.states[0]).toBe('registering');
    expect(worker!.states.slice(-2)).toEqual(['unregistering', 'stopped']);
    expect(worker!.states).toContain('serving.(claims.claiming, leases.waiting)');

    const held = trace.of('heldSession').map((t) => t.states);
    expect(held).toHaveLength(2);
    for (const states of held)
      expect(passesThrough(states, ['opening', 'bound.waiting', 'bound.draining', 'releasing', 'released']), states.join(' → ')).toBe(true);
    expect(trace.of('session')).toHaveLength(2);

    // the header comment shows what the example prints (it showed `registering → (claims.claiming, …)`)
    const printed = printedTraces(trace.lines());
    const shown = headerTraces('examples/worker-inspector.ts');
    expect(shown.map((s) => s.name)).toEqual(expect.arrayContaining(['worker', 'heldSession #1']));
    for (const { name, states } of shown)
      expect(passesThrough(printed.get(name) ?? [], states), `${name}: ${states.join(' → ')}`).toBe(true);
  });
});
