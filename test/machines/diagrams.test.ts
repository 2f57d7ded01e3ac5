import { readFileSync } from 'node:fs';
import { and, createMachine, fromPromise, not, setup, stateIn } from 'xstate';
import { describe, expect, it } from 'vitest';
import { ARCHITECTURE_MD, DIAGRAMS, blockIn, diagramBlock, withDiagrams } from '../../scripts/machine-diagrams.js';
import { guardLabel, machineDiagram } from '../../scripts/state-diagram.js';

describe('docs/architecture.md shows each machine as generated from its definition', () => {
  const doc = readFileSync(ARCHITECTURE_MD, 'utf8');
  for (const [name, machine] of Object.entries(DIAGRAMS)) {
    it(`the ${name} diagram is the one its machine definition gives`, () => {
      expect(blockIn(doc, name), `docs/architecture.md has no ${name} diagram markers`).toBeDefined();
      expect(
        blockIn(doc, name),
        `docs/architecture.md: the ${name} diagram differs from the machine definition: run npm run diagrams`,
      ).toBe(diagramBlock(machine));
    });
  }

  it('regenerating the docs changes nothing, and missing markers are an error', () => {
    expect(withDiagrams(doc) === doc, 'run npm run diagrams').toBe(true);
    expect(() => withDiagrams('# no markers\n')).toThrow(/machine:session:start/);
  });
});

/** A made-up machine with every feature the generator draws. */
const door = setup({
  actors: { unlock: fromPromise(async () => 1) },
  guards: { hasKey: () => true, isAdmin: () => true },
  delays: { grace: 500 },
}).createMachine({
  id: 'door',
  initial: 'closed',
  invoke: { id: 'sensor', src: 'unlock' },
  on: { ALARM: { target: '.broken', guard: not(stateIn('broken')) }, PING: { actions: () => {} } },
  states: {
    closed: {
      initial: 'locked',
      description: 'the door is shut',
      states: {
        locked: { on: { UNLOCK: { target: 'unlocking', guard: 'hasKey' } } },
        unlocking: {
          invoke: {
            id: 'unlocker',
            src: 'unlock',
            onDone: 'unlocked',
            onError: [{ guard: { type: 'isAdmin' }, target: 'unlocked' }, { target: 'locked' }],
          },
        },
        unlocked: { on: { OPEN: '#door.open' }, after: { 1000: 'locked', grace: 'locked' } },
      },
    },
    open: {
      always: { guard: and(['hasKey', not('isAdmin')]), target: 'closed' },
      on: { CLOSE: { target: 'closed', guard: () => true }, KNOCK: { actions: () => {} } },
    },
    broken: { type: 'final' },
  },
});

/** Parallel regions, and state keys used more than once. */
const panel = setup({}).createMachine({
  id: 'panel',
  initial: 'off',
  states: {
    off: { on: { POWER: 'on' } },
    on: {
      type: 'parallel',
      onDone: 'off',
      states: {
        light: { initial: 'off', states: { off: { on: { TOGGLE: 'on' } }, on: { on: { TOGGLE: 'off' } } } },
        fan: { initial: 'off', states: { off: { on: { SPIN: 'on' } }, on: { type: 'final' } } },
      },
    },
  },
});

describe('machineDiagram: a Mermaid stateDiagram-v2 from machine.root', () => {
  it('draws nested states, guards, else, always, after, invoke done/error, final states and the root as a note', () => {
    expect(machineDiagram(door).split('\n')).toEqual([
      'stateDiagram-v2',
      '  [*] --> closed',
      '  state closed {',
      '    [*] --> locked',
      '    unlocking : invokes unlock',
      '    locked --> unlocking : UNLOCK [hasKey]',
      '    unlocking --> unlocked : done: unlock',
      '    unlocking --> unlocked : error: unlock [isAdmin]',
      '    unlocking --> locked : error: unlock [else]',
      '    unlocked --> locked : after 1000ms',
      '    unlocked --> locked : after grace',
      '  }',
      '  note right of closed',
      '    the door is shut',
      '  end note',
      '  open : stays on KNOCK',
      '  unlocked --> open : OPEN',
      '  open --> closed : CLOSE [inline]',
      '  open --> closed : always [and(hasKey, not(isAdmin))]',
      '  broken --> [*]',
      '  note left of closed',
      '    in every state of door:',
      '    invokes unlock',
      '    ALARM [not(stateIn(broken))] → broken',
      '    stays on PING',
      '  end note',
      '',
    ]);
  });

  it('draws parallel regions separated by --, and gives a key used twice its path as id', () => {
    expect(machineDiagram(panel).split('\n')).toEqual([
      'stateDiagram-v2',
      '  [*] --> off',
      '  state on {',
      '    state light {',
      '      [*] --> on_light_off',
      '      state "off" as on_light_off',
      '      state "on" as on_light_on',
      '      on_light_off --> on_light_on : TOGGLE',
      '      on_light_on --> on_light_off : TOGGLE',
      '    }',
      '    --',
      '    state fan {',
      '      [*] --> on_fan_off',
      '      state "off" as on_fan_off',
      '      state "on" as on_fan_on',
      '      on_fan_off --> on_fan_on : SPIN',
      '      on_fan_on --> [*]',
      '    }',
      '  }',
      '  off --> on : POWER',
      '  on --> off : done',
      '',
    ]);
  });

  it('names an invoked actor by its src, an in-place machine by its id, other in-place logic inline', () => {
    const child = createMachine({ id: 'child', initial: 'a', states: { a: { type: 'final' } } });
    const steps = setup({ actors: { callModel: fromPromise(async () => 1) } }).createMachine({
      id: 'steps',
      initial: 'x',
      states: {
        x: { invoke: { src: 'callModel', onDone: 'y', onError: 'z' } },
        y: { invoke: { src: child, onDone: 'z' } },
        z: { invoke: { src: fromPromise(async () => 2), onDone: 'x' } },
      },
    });
    expect(machineDiagram(steps).split('\n')).toEqual([
      'stateDiagram-v2',
      '  [*] --> x',
      '  x : invokes callModel',
      '  y : invokes child',
      '  z : invokes inline',
      '  x --> y : done: callModel',
      '  x --> z : error: callModel',
      '  y --> z : done: child',
      '  z --> x : done: inline',
      '',
    ]);
  });

  it('names guards as written: a name, a guard object, and/or/not, stateIn, inline', () => {
    expect(guardLabel('hasKey')).toBe('hasKey');
    expect(guardLabel({ type: 'isAdmin' })).toBe('isAdmin');
    expect(guardLabel(and(['a', not(stateIn({ b: 'c' }))]))).toBe('and(a, not(stateIn({"b":"c"})))');
    expect(guardLabel(() => true)).toBe('inline');
    expect(guardLabel(undefined)).toBeUndefined();
  });

  it('gives the same text for the same definition', () => {
    expect(machineDiagram(door)).toBe(machineDiagram(door));
    for (const machine of Object.values(DIAGRAMS)) expect(machineDiagram(machine)).toBe(machineDiagram(machine));
  });
});
