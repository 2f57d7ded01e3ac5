import { join } from 'node:path';
import { createInspector } from '@statelyai/inspect';
import { createActor, createMachine } from 'xstate';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { localAdapter, runInspectedAgent } from '../../examples/inspector.js';
import { stateName, stateTrace } from '../../examples/state-trace.js';
import { killAllChildren, spawnTs } from '../crash/child-util.js';
import { headerTraces, passesThrough, printedTraces } from '../helpers/header-traces.js';
import { tempDir } from '../helpers/tmp.js';

const dir = tempDir('actorloop-inspector-');
afterEach(async () => {
  await killAllChildren();
});
afterAll(async () => {
  await dir.cleanup();
});

describe('the runtime inspect option shows the states each machine passes through', () => {
  it('an approval run: the session executes twice, each run attempt steps and ends, each batch runs', async () => {
    const trace = stateTrace();
    const run = await runInspectedAgent(trace.inspect);
    expect(run).toEqual({ first: 'suspended', outcome: 'completed' });

    const [session, ...moreSessions] = trace.of('session');
    expect(moreSessions).toEqual([]);
    // each attempt is prepared, executed and settled; between them the session rests suspended, waiting for the approval
    expect(session!.states, session!.states.join(' → ')).toEqual([
      'idle',
      'preparing',
      'executing',
      'finalizing',
      'suspended',
      'preparing',
      'executing',
      'finalizing',
      'idle',
      'closing',
      'closed',
    ]);

    // one run machine per attempt: the prompt's suspends after its second model step, the respond's
    // runs the approved transfer first, then steps to the final answer
    const runs = trace.of('run').map((t) => t.states);
    expect(runs).toHaveLength(2);
    expect(
      passesThrough(runs[0]!, [
        'starting',
        'callingModel',
        'committingIntent',
        'runningTools',
        'committingResults',
        'callingModel',
        'committingIntent',
        'ending',
        'done',
      ]),
      runs[0]!.join(' → '),
    ).toBe(true);
    expect(runs[0]).not.toContain('verifyingFinal');
    expect(
      passesThrough(runs[1]!, [
        'starting',
        'runningTools',
        'committingResults',
        'callingModel',
        'verifyingFinal',
        'committingFinal',
        'delivering',
        'ending',
        'done',
      ]),
      runs[1]!.join(' → '),
    ).toBe(true);

    const batches = trace.of('toolBatch').map((t) => t.states);
    expect(batches).toHaveLength(2);
    // one batch per step: the lookups run in parallel, the approved transfer alone
    expect(batches).toEqual([
      ['runningParallel', 'done'],
      ['runningExclusive', 'done'],
    ]);
    // three tool calls (two lookups, the approved transfer), each its own actor
    expect(trace.of('toolCall')).toHaveLength(3);
    expect(trace.of('toolCall').every((t) => !t.isMachine && t.states.length === 0)).toBe(true);
    // every effect is a named actor of its own (one per phase); prepareContext runs only when a
    // steer waits or the context is too large, which this run never has
    expect(trace.of('prepareContext')).toHaveLength(0);
    for (const phase of [
      'startRun',
      'callModel',
      'commitIntent',
      'commitResults',
      'verifyFinal',
      'commitFinal',
      'deliverFinal',
      'endRun',
      'settleAttempt',
    ]) {
      expect(trace.of(phase).length, phase).toBeGreaterThan(0);
    }
  });

  it('examples/inspector.ts prints one line of states per machine actor', async () => {
    const child = spawnTs('examples/inspector.ts', [join(dir.path, 'events.jsonl')], { label: 'inspector.ts' });
    const exit = await child.waitExit(30_000);
    expect(exit.code, child.describe()).toBe(0);
    const out = child.lines.join('\n');
    expect(out).toContain('first attempt: suspended');
    expect(out).toContain('outcome: completed');
    expect(out).toMatch(
      /^ {2}session: idle → preparing → executing → finalizing → suspended → preparing → executing → finalizing → idle → closing → closed$/m,
    );
    expect(out).toMatch(
      /^ {2}run #1: starting → .*callingModel → committingIntent → runningTools → committingResults → .* → ending → done$/m,
    );
    expect(out).toMatch(/^ {2}run #2: starting → runningTools → .*verifyingFinal → committingFinal → delivering → ending → done$/m);
    expect(out).toMatch(/^ {2}toolBatch #1: runningParallel → done$/m);
    expect(out).toMatch(/^ {2}toolBatch #2: runningExclusive → done$/m);
    expect(out).toMatch(/^ {2}toolCall: 3 actors without states \(call-0, call-1, call-0\)$/m);
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

describe("the examples' header comments show what they print", () => {
  // a header showed states no machine has (`stepping`, session `idle → executing → idle`)
  it('each state line of examples/inspector.ts passes through the states the example prints, in order', async () => {
    const trace = stateTrace();
    await runInspectedAgent(trace.inspect);
    const printed = printedTraces(trace.lines());
    const shown = headerTraces('examples/inspector.ts');
    expect(shown.map((s) => s.name)).toEqual(expect.arrayContaining(['session', 'run #1']));
    for (const { name, states } of shown)
      expect(passesThrough(printed.get(name) ?? [], states), `${name}: ${states.join(' → ')}`).toBe(true);
  });

  // `flag()` read `--port abc` as NaN, and the page's server threw a RangeError with its stack
  it('examples/inspector.ts --serve refuses a port or delay that is not a whole number in one line, exit 2', async () => {
    for (const [args, line] of [
      [['--port', 'abc'], 'inspector.ts: --port: expected a whole number 0–65535 (got "abc")'],
      [['--tool-delay', '-1'], 'inspector.ts: --tool-delay: expected a whole number of milliseconds, 0–600000 (got "-1")'],
    ] as const) {
      const child = spawnTs('examples/inspector.ts', ['--serve', ...args], { label: `inspector.ts --serve ${args.join(' ')}` });
      const exit = await child.waitExit(30_000);
      expect(child.stderr.trim(), child.describe()).toBe(line);
      expect(exit.code, child.describe()).toBe(2);
    }
  });
});

describe('stateTrace', () => {
  it('writes a nested state value as a.b and parallel regions in parentheses', () => {
    expect(stateName('idle')).toBe('idle');
    expect(stateName({ running: 'parallel' })).toBe('running.parallel');
    expect(stateName({ running: { group: 'draining' } })).toBe('running.group.draining');
    expect(stateName({ light: 'on', fan: 'off' })).toBe('(light.on, fan.off)');
  });

  it('records each state once per visit: consecutive repeats are dropped, a return is kept', () => {
    const machine = createMachine({
      id: 'door',
      initial: 'closed',
      states: {
        closed: { on: { OPEN: 'open', KNOCK: {} } },
        open: { initial: 'wide', states: { wide: { on: { PUSH: 'ajar' } }, ajar: {} }, on: { CLOSE: 'closed' } },
      },
    });
    const trace = stateTrace();
    const actor = createActor(machine, { inspect: trace.inspect }).start();
    for (const type of ['KNOCK', 'KNOCK', 'OPEN', 'PUSH', 'CLOSE', 'KNOCK']) actor.send({ type });
    actor.stop();
    expect(trace.lines()).toEqual(['door: closed → open.wide → open.ajar → closed']);
  });
});
