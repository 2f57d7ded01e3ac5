import { describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  createRuntime,
  isValidationError,
  mcpTools,
  memoryStore,
  scriptedModel,
  type AnyTool,
  type EventStore,
  type ScriptedModel,
  type ScriptedStep,
} from '../../src/index.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { collect } from '../helpers/drafts.js';
import { httpClient, httpServer, journalOf, mcpFixtures, stdioClient, until } from './mcp/servers.js';

// The server (test/tools/mcp/server.ts, MCP_TEST_VARIANT=live) changes its tool list while the
// client stays connected when `change_tools` is called: the SDK sends notifications/tools/list_changed.

const { journal, clients } = mcpFixtures('actorloop-mcp-list-');

const events = (store: EventStore): Promise<EventRecord[]> => collect(store.readEvents('s1'));
const resultOf = (log: EventRecord[], callId: string) =>
  log.find((e) => e.type === 'tool/result' && e.payload.callId === callId)?.payload.outcome as Record<string, unknown> | undefined;
const rejections = (log: EventRecord[]) =>
  log.filter((e) => e.type === 'tool/batch-rejected').flatMap((e) => e.payload.issues as { callId: string; message: string }[]);
const fingerprints = async (store: EventStore) =>
  (await events(store)).filter((e) => e.type === 'run/start').map((e) => e.payload.executionProfileFingerprint as string);
const names = (tools: readonly AnyTool[]) => tools.map((t) => t.name);
/** The tools the server's live list offers now (what the next attempt is offered). */
const listed = (tools: AnyTool[]) => names(tools[0]!.list!.tools());

async function stdio(env: Record<string, string>): Promise<Client> {
  const { client } = await stdioClient({ MCP_TEST_VARIANT: 'live', ...env });
  clients.push(client);
  return client;
}

/** A scripted model that, before its step `i`, waits for `gates[i]` (the list to be read again). */
function gated(steps: ScriptedStep[], gates: Record<number, () => Promise<void>>): ScriptedModel {
  const model = scriptedModel(steps);
  let i = 0;
  return {
    modelId: model.modelId,
    requests: model.requests,
    get remaining() {
      return model.remaining;
    },
    async call(request, onEvent) {
      await gates[i++]?.();
      return model.call(request, onEvent);
    },
  };
}

const call = (id: string, name: string, args: Record<string, unknown>): ScriptedStep => ({ toolCalls: [{ id, name, arguments: args }] });
const offeredIn = (model: ScriptedModel, i: number) => model.requests[i]!.tools.map((t) => t.name);

describe('mcpTools follows the tool list a connected server changes (notifications/tools/list_changed)', () => {
  it('a tool the server adds is offered to the next attempt, under a new fingerprint; the attempt under way keeps the tools it was offered', async () => {
    const tools = await mcpTools(await stdio({}));
    const store = memoryStore();
    let before = '';
    const model = gated(
      [call('c1', 'change_tools', { how: 'add' }), call('x1', 'extra', {}), 'first done', call('x2', 'extra', {}), 'second done'],
      // the list is read again while the first attempt runs: it still is not offered `extra`
      { 1: () => until(() => live.executionProfileFingerprint !== before, 'the new list to be read') },
    );
    const live = createRuntime({ store, model, tools });
    before = live.executionProfileFingerprint;
    const session = await live.openSession('s1');
    expect((await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' })).status).toBe('succeeded');
    expect(offeredIn(model, 1)).not.toContain('extra');
    expect(rejections(await events(store))).toEqual([
      expect.objectContaining({ callId: 'x1', message: expect.stringMatching(/unknown tool "extra"/) }),
    ]);
    const after = live.executionProfileFingerprint;
    expect(after).not.toBe(before);
    expect((await session.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'again' })).status).toBe('succeeded');
    expect(offeredIn(model, 3)).toEqual(['add', 'record', 'slow', 'fails', 'change_tools', 'extra']);
    expect(resultOf(await events(store), 'x2')).toMatchObject({ kind: 'completed', content: 'extra', isError: false });
    expect(await fingerprints(store)).toEqual([before, after]);
    await live.close();
  });

  it('a tool removed or reshaped during an attempt: its call there is not sent; the next attempt gets the unknown-tool feedback and the new schema', async () => {
    const file = journal();
    const tools = await mcpTools(await stdio({ MCP_TEST_JOURNAL: file }));
    const required = () =>
      (tools[0]!.list!.tools().find((t) => t.name === 'add')?.spec.parameters as { required?: string[] } | undefined)?.required ?? [];
    const store = memoryStore();
    const model = gated(
      [
        call('c1', 'change_tools', { how: 'remove' }),
        call('r1', 'record', { note: 'late' }),
        call('c2', 'change_tools', { how: 'reshape' }),
        call('a1', 'add', { a: 1, b: 2 }),
        'first done',
        {
          toolCalls: [
            { id: 'r2', name: 'record', arguments: { note: 'gone' } },
            { id: 'a2', name: 'add', arguments: { a: 1, b: 2 } },
          ],
        },
        call('a3', 'add', { a: 1, b: 2, c: 3 }),
        'second done',
      ],
      {
        1: () => until(() => !listed(tools).includes('record'), 'record to leave the list'),
        3: () => until(() => required().includes('c'), 'the new schema of add'),
      },
    );
    const runtime = createRuntime({ store, model, tools });
    const session = await runtime.openSession('s1');
    await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    let log = await events(store);
    expect(resultOf(log, 'r1')).toMatchObject({
      kind: 'completed',
      isError: true,
      content: expect.stringMatching(/no longer offers the tool record \(the call was not sent\)/),
    });
    expect(resultOf(log, 'a1')).toMatchObject({
      kind: 'completed',
      isError: true,
      content: expect.stringMatching(/changed the input schema of add .*not sent.*next attempt/),
    });
    expect(journalOf(file).filter((l) => l.startsWith('record'))).toEqual([]);
    await session.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'again' });
    log = await events(store);
    expect(offeredIn(model, 5)).not.toContain('record');
    const issues = rejections(log);
    expect(issues.find((i) => i.callId === 'r2')?.message).toMatch(/unknown tool "record"/);
    expect(issues.find((i) => i.callId === 'a2')?.message).toMatch(/arguments do not match the schema: .*c/);
    expect(resultOf(log, 'a3')).toMatchObject({ kind: 'completed', content: '6', isError: false });
    const [f1, f2] = await fingerprints(store);
    expect(f2).not.toBe(f1);
    await runtime.close();
  });

  it("a refused new list offers none of the server's tools until a good one comes, is reported to onListError, and the session goes on", async () => {
    const errors: Error[] = [];
    const tools = await mcpTools(await stdio({}), {
      onListError: (e) => {
        errors.push(e);
        throw new Error('a failing hook is ignored');
      },
    });
    const store = memoryStore();
    const model = gated(
      [
        call('c1', 'change_tools', { how: 'break' }),
        call('a1', 'add', { a: 1, b: 2 }),
        'first done',
        call('a2', 'add', { a: 2, b: 2 }),
        'second done',
        call('a3', 'add', { a: 3, b: 4 }),
        'third done',
      ],
      { 1: () => until(() => errors.length > 0, 'the refusal') },
    );
    const runtime = createRuntime({ store, model, tools });
    const session = await runtime.openSession('s1');
    // the attempt under way keeps its tools: add is unchanged on the server and still runs
    expect((await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' })).status).toBe('succeeded');
    expect(resultOf(await events(store), 'a1')).toMatchObject({ kind: 'completed', content: '3', isError: false });
    expect(isValidationError(errors[0])).toBe(true);
    expect(errors[0]!.message).toMatch(/bad\.name does not fit the providers' rule/);
    expect(listed(tools)).toEqual([]);
    expect((await session.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'again' })).status).toBe('succeeded');
    expect(offeredIn(model, 3)).toEqual([]);
    expect(rejections(await events(store)).find((i) => i.callId === 'a2')?.message).toMatch(/unknown tool "add"; available: none/);
    // the server fixes its list (through the tool the first attempt was offered): the tools come back
    const change = tools.find((t) => t.name === 'change_tools')!;
    const ctx = { signal: new AbortController().signal, idempotencyKey: 'k1', sessionId: 's1', runId: 'x', callId: 'x', emit: () => {} };
    expect(await change.execute({ how: 'heal' }, ctx)).toMatchObject({ content: 'changed: heal' });
    await until(() => listed(tools).length === 5, 'the healed list');
    await session.execute({ kind: 'prompt', runId: 'r3', attemptId: 'a1', message: 'once more' });
    expect(resultOf(await events(store), 'a3')).toMatchObject({ kind: 'completed', content: '7', isError: false });
    const [f1, f2, f3] = await fingerprints(store);
    expect(f2).not.toBe(f1);
    expect(f3).toBe(f1); // the same list as at the start: the same profile
    await runtime.close();
  });
});

describe('a new list with a tool the MCP schema refuses', () => {
  it('an input schema whose type is not "object": the list is refused (onListError gets the ValidationError naming the tool), as at the start', async () => {
    const errors: Error[] = [];
    const tools = await mcpTools(await stdio({}), { onListError: (e) => void errors.push(e) });
    const change = tools.find((t) => t.name === 'change_tools')!;
    const ctx = { signal: new AbortController().signal, idempotencyKey: 'k1', sessionId: 's1', runId: 'x', callId: 'x', emit: () => {} };
    const before = tools[0]!.revision!();
    await change.execute({ how: 'scalar' }, ctx);
    await until(() => errors.length > 0, 'the refusal');
    expect(isValidationError(errors[0])).toBe(true);
    expect((errors[0] as unknown as { issues: unknown }).issues).toEqual([
      { path: ['tools', 'scalar', 'inputSchema', 'type'], message: expect.stringMatching(/type must be "object" .*not "string"/) },
    ]);
    expect(listed(tools)).toEqual([]);
    expect(tools[0]!.revision!()).not.toBe(before);
    await change.execute({ how: 'heal' }, ctx);
    await until(() => listed(tools).length === 5, 'the healed list');
    expect(tools[0]!.revision!()).toBe(before);
  });
});

describe('the options that name tools, on a list read again', () => {
  it('a tool named in needsApproval keeps it when it is reshaped or comes back after a refused list; one the server removes is offered no more', async () => {
    const errors: Error[] = [];
    const tools = await mcpTools(await stdio({}), {
      prefix: 'm_',
      needsApproval: ['add', 'record'],
      onListError: (e) => void errors.push(e),
    });
    const approval = () => tools[0]!.list!.tools().map((t) => [t.name, t.needsApproval ?? false]);
    const change = tools.find((t) => t.name === 'm_change_tools')!;
    const ctx = { signal: new AbortController().signal, idempotencyKey: 'k1', sessionId: 's1', runId: 'x', callId: 'x', emit: () => {} };
    const before = tools[0]!.revision!();
    await change.execute({ how: 'reshape' }, ctx);
    await until(() => tools[0]!.revision!() !== before, 'the reshaped list');
    await change.execute({ how: 'remove' }, ctx);
    await until(() => !listed(tools).includes('m_record'), 'record to leave the list');
    await change.execute({ how: 'break' }, ctx);
    await until(() => errors.length > 0, 'the refusal');
    await change.execute({ how: 'heal' }, ctx);
    await until(() => listed(tools).length === 4, 'the healed list');
    expect(approval()).toEqual([
      ['m_add', true],
      ['m_slow', false],
      ['m_fails', false],
      ['m_change_tools', false],
    ]);
    expect(tools[0]!.list!.tools()[0]!.spec.parameters).toMatchObject({ required: ['a', 'b', 'c'] });
    expect(errors.map((e) => e.message)).toEqual([expect.stringMatching(/bad\.name does not fit/)]);
  });
});

describe('mcpTools follows a list change over Streamable HTTP on loopback', () => {
  it('a tool the server adds while the session stays up is callable in the next attempt, under a new fingerprint', async () => {
    const { port } = await httpServer(0, { MCP_TEST_VARIANT: 'live' });
    const client = await httpClient(port);
    clients.push(client);
    const store = memoryStore();
    const model = scriptedModel([call('c1', 'change_tools', { how: 'add' }), 'first done', call('x1', 'extra', {}), 'second done']);
    const tools = await mcpTools(client);
    const runtime = createRuntime({ store, model, tools });
    const before = runtime.executionProfileFingerprint;
    const session = await runtime.openSession('s1');
    await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    await until(() => listed(tools).includes('extra'), 'the new list to be read');
    await session.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'again' });
    expect(resultOf(await events(store), 'x1')).toMatchObject({ kind: 'completed', content: 'extra', isError: false });
    expect(await fingerprints(store)).toEqual([before, runtime.executionProfileFingerprint]);
    expect(runtime.executionProfileFingerprint).not.toBe(before);
    await runtime.close();
  });
});
