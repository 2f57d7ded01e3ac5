import { describe, expect, it } from 'vitest';
import { memoryStore } from '../../src/index.js';
import { followLog } from '../../src/web/log-follow.js';
import { draft } from './chat-fixtures.js';

// src/web/log-follow.ts: the log from a cursor, then every later append, until the signal aborts.

describe('following a session log', () => {
  it('a follow aborted while its reader holds a record ends at the next pull: no poll of the head is left behind', async () => {
    const store = memoryStore();
    const { writerEpoch } = await store.attachWriter('s');
    await store.append('s', writerEpoch, 1, [draft('user/message', { message: { role: 'user', content: 'hi' } })]);
    let heads = 0;
    const getHead = store.getHead.bind(store);
    store.getHead = (id: string) => (heads++, getHead(id));
    const ac = new AbortController();
    const follow = followLog(store, 's', 1, { pollMs: 10, signal: ac.signal });
    expect((await follow.next()).value?.seq).toBe(1);
    ac.abort(); // the reader is done (a reply ended) while the follow waits at its yield
    const pulled = await Promise.race([follow.next(), new Promise((r) => setTimeout(() => r('still following'), 500))]);
    expect(pulled).toEqual({ done: true, value: undefined });
    const before = heads;
    await new Promise((r) => setTimeout(r, 100));
    expect(heads - before).toBe(0);
    await store.close();
  });
});
