import { describe, expect, it } from 'vitest';
import { createRuntime, isValidationError, memoryStore, scriptedModel, type Message } from '../../src/index.js';
import { toolPairingIssues } from '../../src/contracts/message.js';

/**
 * A message history an app hands in (bootstrap messages, a checkpoint) pairs every tool call with
 * its result as providers require: each tool message names the call it answers, the results of an
 * assistant message's calls follow it directly, each call answered once.
 */
const call = (id: string) => ({ id, name: 'lookup', arguments: '{}' });
const asks = (...ids: string[]): Message => ({ role: 'assistant', content: '', toolCalls: ids.map(call) });
const answers = (id: string): Message => ({ role: 'tool', content: 'r', toolCallId: id });
const user = (content = 'u'): Message => ({ role: 'user', content });
const paths = (messages: Message[]) => toolPairingIssues(messages).map((i) => i.path);

describe('tool calls and results of a message history pair up', () => {
  it('a history whose every call is answered right after its message is taken (ids may repeat across messages)', () => {
    expect(paths([user(), asks('c1', 'c2'), answers('c2'), answers('c1'), { role: 'assistant', content: 'ok' }])).toEqual([]);
    expect(paths([user(), asks('c1'), answers('c1'), asks('c1'), answers('c1'), user()])).toEqual([]);
    expect(paths([{ role: 'system', content: 's' }, user(), { role: 'assistant', content: 'a', toolCalls: [] }])).toEqual([]);
  });

  it('a tool message with no toolCallId is refused at its index', () => {
    expect(paths([user(), { role: 'tool', content: 'x' }])).toEqual([[1, 'toolCallId']]);
    expect(paths([asks('c1'), answers('c1'), { role: 'tool', content: 'x', toolCallId: '' }])).toEqual([[2, 'toolCallId']]);
  });

  it('a tool message that answers no call of the assistant message right before its results is refused', () => {
    expect(paths([answers('nope')])).toEqual([[0, 'toolCallId']]);
    expect(paths([asks('c1'), answers('c1'), answers('c2')])).toEqual([[2, 'toolCallId']]);
    // a result after a user message: the call's results no longer follow it
    expect(paths([asks('c1'), user(), answers('c1')])).toEqual([
      [0, 'toolCalls', 0],
      [2, 'toolCallId'],
    ]);
  });

  it('a call answered twice, or an id given to two calls of one message, is refused', () => {
    expect(paths([asks('c1'), answers('c1'), answers('c1')])).toEqual([[2, 'toolCallId']]);
    expect(paths([asks('c1', 'c1'), answers('c1')])).toEqual([[0, 'toolCalls', 1, 'id']]);
  });

  it('an assistant tool call with no result after it is refused (providers refuse a call left unanswered)', () => {
    expect(paths([user(), asks('c1', 'c2'), answers('c1')])).toEqual([[1, 'toolCalls', 1]]);
    expect(paths([asks('c1'), asks('c2'), answers('c2')])).toEqual([[0, 'toolCalls', 0]]);
    expect(toolPairingIssues([asks('c1')])[0]!.message).toContain('c1');
  });

  it('tool calls on a message that is not the assistant, or a toolCallId on one that is not a tool result, is refused', () => {
    expect(paths([{ role: 'user', content: 'u', toolCalls: [call('c1')] }])).toEqual([[0, 'toolCalls']]);
    expect(paths([{ role: 'user', content: 'u', toolCallId: 'c1' }])).toEqual([[0, 'toolCallId']]);
  });
});

describe('bootstrap messages are a history that pairs up', () => {
  it('createRuntime refuses bootstrapMessages with a tool message and no toolCallId, naming its index', () => {
    let error: unknown;
    try {
      createRuntime({ store: memoryStore(), model: scriptedModel(['ok']), bootstrapMessages: [user(), { role: 'tool', content: 'x' }] });
    } catch (e) {
      error = e;
    }
    expect(isValidationError(error) && error.issues.map((i) => i.path)).toEqual([['bootstrapMessages', 1, 'toolCallId']]);
  });

  it('createRuntime refuses an unanswered call in bootstrapMessages, and takes a paired one', async () => {
    expect(() => createRuntime({ store: memoryStore(), model: scriptedModel(['ok']), bootstrapMessages: [user(), asks('c1')] })).toThrow(
      /bootstrapMessages\.1\.toolCalls\.0/,
    );
    const rt = createRuntime({
      store: memoryStore(),
      model: scriptedModel(['ok']),
      bootstrapMessages: [user(), asks('c1'), answers('c1')],
    });
    const s = await rt.openSession('s');
    expect((await s.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' })).status).toBe('succeeded');
    await rt.close();
  });
});
