import { describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { createRuntime, isValidationError, mcpTools, memoryStore, scriptedModel, type EventStore } from '../../src/index.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { previewRecovery } from '../../src/runtime/recovery-preview.js';
import { collect } from '../helpers/drafts.js';
import { httpClient, httpServer, journalOf, mcpFixtures, stdioClient, until } from './mcp/servers.js';

// What mcpTools makes of the tools a server lists: names that are also properties of every plain
// object, and listings the MCP schema refuses (test/tools/mcp/server.ts, MCP_TEST_VARIANT=names|scalar).

const { journal, clients } = mcpFixtures('actorloop-mcp-listing-');

const events = (store: EventStore): Promise<EventRecord[]> => collect(store.readEvents('s1'));
const ODD = ['__proto__', 'constructor', 'toString'];

async function stdio(env: Record<string, string>): Promise<Client> {
  const { client } = await stdioClient(env);
  clients.push(client);
  return client;
}

async function http(env: Record<string, string>): Promise<Client> {
  const { port } = await httpServer(0, env);
  const client = await httpClient(port);
  clients.push(client);
  return client;
}

describe.each([
  ['stdio', stdio],
  ['Streamable HTTP', http],
] as const)('tools named __proto__, constructor and toString (over %s)', (_, connect) => {
  it('are tools like any other: their options are their own entries, and a run calling them logs its assistant message and their results', async () => {
    const file = journal();
    const client = await connect({ MCP_TEST_VARIANT: 'names', MCP_TEST_JOURNAL: file });
    // an object's own entries (JSON: `__proto__` is an entry, not the prototype) and a Map alike
    const fromJson = JSON.parse('{"__proto__": ["proto-lock"], "record": ["notes"]}') as Record<string, string[]>;
    const tools = await mcpTools(client, { resources: fromJson, parallel: ['toString'], needsApproval: [] });
    const byName = new Map(tools.map((t) => [t.name, t]));
    expect(ODD.map((n) => [n, byName.get(n)?.resources, byName.get(n)?.mode])).toEqual([
      ['__proto__', ['proto-lock'], 'exclusive'],
      ['constructor', [], 'exclusive'],
      ['toString', [], 'parallel'],
    ]);
    const viaMap = await mcpTools(client, { include: ['constructor'], resources: new Map([['constructor', ['ctor-lock']]]) });
    expect(viaMap.map((t) => [t.name, t.resources])).toEqual([['constructor', ['ctor-lock']]]);

    const store = memoryStore();
    const model = scriptedModel([{ toolCalls: ODD.map((name, i) => ({ id: `c${i}`, name, arguments: { note: `n${i}` } })) }, 'done']);
    const runtime = createRuntime({ store, model, tools });
    const session = await runtime.openSession('s1');
    const r = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    expect(r.status).toBe('succeeded');
    const log = await events(store);
    const asked = log.find((e) => e.type === 'assistant/message')!.payload.message as { toolCalls: { name: string }[] };
    expect(asked.toolCalls.map((c) => c.name)).toEqual(ODD);
    const intents = log.filter((e) => e.type === 'tool/call').map((e) => [e.payload.name, e.payload.resources]);
    expect(intents).toEqual([
      ['__proto__', ['proto-lock']],
      ['constructor', []],
      ['toString', []],
    ]);
    const results = log.filter((e) => e.type === 'tool/result').map((e) => (e.payload.outcome as { content: string }).content);
    expect(results).toEqual(['__proto__ ran: n0', 'constructor ran: n1', 'toString ran: n2']);
    expect(journalOf(file).map((l) => l.split(' ').slice(0, 2).join(' '))).toEqual(['__proto__ n0', 'constructor n1', 'toString n2']);
    await runtime.close();
  });
});

describe('a listed tool the MCP schema refuses (an input schema whose type is not "object")', () => {
  it('mcpTools throws a ValidationError naming the tool and why; include can leave it out', async () => {
    const client = await stdio({ MCP_TEST_VARIANT: 'scalar' });
    const e = await mcpTools(client).catch((x: unknown) => x);
    expect(isValidationError(e)).toBe(true);
    expect((e as { issues: unknown }).issues).toEqual([
      { path: ['tools', 'scalar', 'inputSchema', 'type'], message: expect.stringMatching(/type must be "object" .*not "string"/) },
    ]);
    // the rest of the list is read as the SDK reads it
    const rest = await mcpTools(client, { include: ['add', 'record'] });
    expect(rest.map((t) => t.name)).toEqual(['add', 'record']);
    const ctx = { signal: new AbortController().signal, idempotencyKey: 'k1', sessionId: 's', runId: 'r', callId: 'c', emit: () => {} };
    expect(await rest[0]!.execute({ a: 1, b: 2 }, ctx)).toMatchObject({ kind: 'completed', content: '3', structured: { sum: 3 } });
  });
});

describe('recovery of an MCP call whose outcome is unknown', () => {
  it('without the reconcile option the tools have no reconcile: the preview says uncertain-hanging; with it, reconcile', async () => {
    const file = journal();
    const client = await stdio({ MCP_TEST_JOURNAL: file });
    for (const withReconcile of [false, true]) {
      const tools = await mcpTools(client, withReconcile ? { reconcile: () => undefined } : {});
      expect(tools.some((t) => t.reconcile !== undefined)).toBe(withReconcile);
      const store = memoryStore();
      const runtime = createRuntime({
        store,
        model: scriptedModel([{ toolCalls: [{ id: 's1', name: 'slow', arguments: { ms: 60_000 } }] }, 'done']),
        tools,
      });
      const session = await runtime.openSession('s1');
      const starts = () => journalOf(file).filter((l) => l.startsWith('started')).length;
      const before = starts();
      const running = session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
      await until(() => starts() > before, 'the slow call to start');
      const preview = await previewRecovery(store, 's1', tools);
      expect(preview.uncertainToolCalls.map((c) => [c.name, c.resolution])).toEqual([
        ['slow', withReconcile ? 'reconcile' : 'uncertain-hanging'],
      ]);
      await session.requestCancel();
      await running;
      await runtime.close();
    }
  });
});

describe('a server whose tool list cannot be read', () => {
  it('mcpTools rejects, and the client its factory made for that connect is closed (its server process ends)', async () => {
    const made: number[] = [];
    const e = await mcpTools(async () => {
      const { client, transport } = await stdioClient({ MCP_TEST_VARIANT: 'unlisted' });
      clients.push(client);
      made.push(transport.pid!);
      return client;
    }).catch((x: unknown) => x);
    expect(String(e)).toMatch(/the tool list is not available/);
    expect(made).toHaveLength(1);
    const pid = made[0]!;
    expect(pid).toBeGreaterThan(0);
    const alive = () => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    await until(() => !alive(), 'the server process to end');
  });
});

describe("the options that name tools (include, parallel, needsApproval, resources) take the server's names", () => {
  it('a name the server does not list is refused in every one of them (a ValidationError naming it), the prefixed name too', async () => {
    const client = await stdio({});
    const refusal = async (options: Parameters<typeof mcpTools>[1]) => {
      const e = await mcpTools(client, options).catch((x: unknown) => x);
      expect(isValidationError(e)).toBe(true);
      return (e as { issues: { path: unknown[]; message: string }[] }).issues;
    };
    expect(await refusal({ needsApproval: ['recrod'] })).toEqual([
      { path: ['needsApproval'], message: 'the server lists no tool named recrod' },
    ]);
    expect(await refusal({ parallel: ['ad'], resources: new Map([['slwo', ['k']]]) })).toEqual([
      { path: ['parallel'], message: 'the server lists no tool named ad' },
      { path: ['resources'], message: 'the server lists no tool named slwo' },
    ]);
    // the name the model sees is not the server's: the message says which one to give
    for (const key of ['include', 'parallel', 'needsApproval'] as const)
      expect(await refusal({ prefix: 'fs_', [key]: ['fs_record'] })).toEqual([
        {
          path: [key],
          message: "the server lists no tool named fs_record (these options take the server's names, without prefix: record)",
        },
      ]);
    expect(await refusal({ prefix: 'fs_', resources: { fs_record: ['notes'] } })).toEqual([
      {
        path: ['resources'],
        message: "the server lists no tool named fs_record (these options take the server's names, without prefix: record)",
      },
    ]);
    const tools = await mcpTools(client, { prefix: 'fs_', needsApproval: ['record'], parallel: ['add'], resources: { slow: ['k'] } });
    expect(tools.map((t) => [t.name, t.needsApproval ?? false, t.mode, t.resources])).toEqual([
      ['fs_add', false, 'parallel', []],
      ['fs_record', true, 'exclusive', []],
      ['fs_slow', false, 'exclusive', ['k']],
      ['fs_fails', false, 'exclusive', []],
    ]);
  });
});
