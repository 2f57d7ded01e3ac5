import { describe, expect, it } from 'vitest';
import { CallAbort, onAbort } from '../../src/contracts/abort.js';

describe('CallAbort', () => {
  it('a signal read before the abort is aborted with its reason', () => {
    const ac = new CallAbort();
    const signal = ac.signal;
    const seen: unknown[] = [];
    signal.addEventListener('abort', () => seen.push(signal.reason));
    const reason = new Error('timed out');
    ac.abort(reason);
    expect(signal.aborted).toBe(true);
    expect(seen).toEqual([reason]);
    expect(ac.signal).toBe(signal);
  });

  it('a signal first read after the abort is made aborted, with the same reason', () => {
    const ac = new CallAbort();
    const reason = new Error('cancelled');
    ac.abort(reason);
    expect(ac.signal.aborted).toBe(true);
    expect(ac.signal.reason).toBe(reason);
  });

  it('without a reason aborts with an AbortError, like AbortController', () => {
    const ac = new CallAbort();
    ac.abort();
    expect(ac.signal.reason).toMatchObject({ name: 'AbortError' });
  });

  it('aborts once: a later abort keeps the first reason and runs no hook again', () => {
    const ac = new CallAbort();
    let runs = 0;
    ac.onAbort(() => runs++);
    ac.abort('first');
    ac.abort('second');
    expect(runs).toBe(1);
    expect(ac.reason).toBe('first');
  });

  it('runs a hook added after the abort at once; a withdrawn hook never runs', () => {
    const ac = new CallAbort();
    const runs: string[] = [];
    const off = ac.onAbort(() => runs.push('withdrawn'));
    ac.onAbort(() => runs.push('kept'));
    off();
    ac.abort();
    ac.onAbort(() => runs.push('late'));
    expect(runs).toEqual(['kept', 'late']);
  });
});

describe('onAbort', () => {
  it('calls every hook with the reason, through one listener on the signal', () => {
    const controller = new AbortController();
    const seen: unknown[] = [];
    let added = 0;
    const add = controller.signal.addEventListener.bind(controller.signal);
    controller.signal.addEventListener = ((...args: Parameters<typeof add>) => (added++, add(...args))) as typeof add;
    onAbort(controller.signal, (r) => seen.push(['a', r]));
    onAbort(controller.signal, (r) => seen.push(['b', r]));
    const off = onAbort(controller.signal, (r) => seen.push(['c', r]));
    off();
    controller.abort('stop');
    expect(seen).toEqual([
      ['a', 'stop'],
      ['b', 'stop'],
    ]);
    expect(added).toBe(1);
  });

  it('does nothing for a signal already aborted', () => {
    const seen: unknown[] = [];
    onAbort(AbortSignal.abort('done'), (r) => seen.push(r));
    expect(seen).toEqual([]);
  });
});
