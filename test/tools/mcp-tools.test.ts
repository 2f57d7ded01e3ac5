import { describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { createRuntime, defineTool, isValidationError, mcpTools, memoryStore, scriptedModel, type EventStore } from '../../src/index.js';
import type { EventRecord } from '../../src/contracts/events.js';
import { collect } from '../helpers/drafts.js';
import { scaled } from '../helpers/load.js';
import { httpClient, httpServer, journalOf, mcpFixtures, stdioClient, until } from './mcp/servers.js';

const { journal, clients } = mcpFixtures('actorloop-mcp-');

const events = (store: EventStore, sessionId = 's1'): Promise<EventRecord[]> => collect(store.readEvents(sessionId));
const resultOf = (log: EventRecord[], callId: string) =>
  log.find((e) => e.type === 'tool/result' && e.payload.callId === callId)?.payload.outcome as Record<string, unknown> | undefined;
const intentOf = (log: EventRecord[], callId: string) =>
  log.find((e) => e.type === 'tool/call' && e.payload.callId === callId)?.payload as { idempotencyKey: string; mode: string } | undefined;

async function stdio(env: Record<string, string>): Promise<Client & { pid: number | null }> {
  const { client, transport } = await stdioClient(env);
  clients.push(client);
  return Object.assign(client, {
    get pid() {
      return transport.pid;
    },
  });
}

describe('mcpTools over stdio (a real SDK server in a child process)', () => {
  it('lists the tools with their JSON Schema; exclusive unless named parallel, or readOnlyHint with trustAnnotations', async () => {
    const client = await stdio({});
    const plain = await mcpTools(client);
    expect(plain.map((t) => [t.name, t.mode])).toEqual([
      ['add', 'exclusive'],
      ['record', 'exclusive'],
      ['slow', 'exclusive'],
      ['fails', 'exclusive'],
    ]);
    const add = plain[0]!;
    expect(add.spec.parameters).toMatchObject({
      type: 'object',
      properties: { a: { type: 'number' }, b: { type: 'number' } },
      required: ['a', 'b'],
    });
    expect(add.spec.description).toBe('Adds two numbers');
    expect((await mcpTools(client, { parallel: ['record'] })).map((t) => t.mode)).toEqual([
      'exclusive',
      'parallel',
      'exclusive',
      'exclusive',
    ]);
    expect((await mcpTools(client, { trustAnnotations: true })).map((t) => t.mode)).toEqual([
      'parallel',
      'exclusive',
      'exclusive',
      'exclusive',
    ]);
    expect((await mcpTools(client, { include: ['add'], prefix: 'calc_' })).map((t) => t.name)).toEqual(['calc_add']);
  });

  it('runs calls with the idempotency key in _meta; maps text, structured content and isError; bad arguments go back to the model', async () => {
    const file = journal();
    const client = await stdio({ MCP_TEST_JOURNAL: file });
    const store = memoryStore();
    const model = scriptedModel([
      { toolCalls: [{ id: 'c1', name: 'add', arguments: { a: 2, b: 3 } }] },
      { toolCalls: [{ id: 'c2', name: 'record', arguments: { note: 'hello' } }] },
      { toolCalls: [{ id: 'c3', name: 'add', arguments: { a: 'two', b: 3 } }] },
      { toolCalls: [{ id: 'c4', name: 'fails', arguments: {} }] },
      'done',
    ]);
    const runtime = createRuntime({ store, model, tools: await mcpTools(client) });
    const session = await runtime.openSession('s1');
    const r = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    expect(r.status).toBe('succeeded');
    const log = await events(store);
    expect(resultOf(log, 'c1')).toMatchObject({ kind: 'completed', content: '5', isError: false, structured: { sum: 5 } });
    const key = intentOf(log, 'c2')!.idempotencyKey;
    expect(journalOf(file)).toEqual([`record hello ${key}`]);
    expect(resultOf(log, 'c2')).toMatchObject({ kind: 'completed', content: 'recorded hello' });
    const rejected = log.find((e) => e.type === 'tool/batch-rejected')!.payload.issues as { callId: string; message: string }[];
    expect(rejected[0]).toMatchObject({ callId: 'c3' });
    expect(rejected[0]!.message).toMatch(/arguments do not match the schema: .*a must be number/);
    expect(model.requests[3]!.messages.at(-1)!.content).toContain('must be number');
    expect(resultOf(log, 'c4')).toMatchObject({ kind: 'completed', content: 'it broke', isError: true });
    await runtime.close();
  });

  it("a tool spread into defineTool is refused, pointing to mcpTools' own options: a copy would leave the server's live list", async () => {
    const client = await stdio({});
    const [add] = await mcpTools(client, { include: ['add'] });
    let error: unknown;
    try {
      defineTool({ ...add!, needsApproval: true });
    } catch (e) {
      error = e;
    }
    expect(isValidationError(error) && error.issues.map((i) => i.path[0])).toEqual(['list']);
    expect(String(error)).toMatch(/mcpTools\(client, \{ needsApproval, parallel, resources, timeoutMs, include, prefix, reconcile \}\)/);
  });

  it('refuses a server whose tool schema is not valid JSON Schema, naming the tool', async () => {
    const client = await stdio({ MCP_TEST_VARIANT: 'bad' });
    const e = await mcpTools(client).catch((x: unknown) => x);
    expect(isValidationError(e)).toBe(true);
    expect(String((e as Error).message)).toMatch(/broken.*inputSchema.*not a valid JSON Schema.*strin/s);
  });

  it('an exclusive call whose server is killed mid-call is uncertain and never sent again; the next call reconnects and a changed tool list changes the fingerprint', async () => {
    const file = journal();
    const made: (Client & { pid: number | null })[] = [];
    const factory = async () => {
      const c = await stdio({ MCP_TEST_JOURNAL: file, MCP_TEST_VARIANT: made.length === 0 ? '' : 'changed' });
      made.push(c);
      return c;
    };
    const store = memoryStore();
    const model = scriptedModel([
      { toolCalls: [{ id: 's1', name: 'slow', arguments: { ms: 60_000 } }] },
      { toolCalls: [{ id: 'r1', name: 'record', arguments: { note: 'after' } }] },
      'done',
      'again',
    ]);
    const runtime = createRuntime({ store, model, tools: await mcpTools(factory) });
    const before = runtime.executionProfileFingerprint;
    const session = await runtime.openSession('s1');
    const running = session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    await until(() => journalOf(file).some((l) => l.startsWith('started')), 'the slow call to start');
    process.kill(made[0]!.pid!, 'SIGKILL');
    const r = await running;
    expect(r.status).toBe('succeeded');
    const log = await events(store);
    expect(resultOf(log, 's1')).toMatchObject({ kind: 'uncertain-hanging' });
    expect(String(resultOf(log, 's1')!.content)).toMatch(/dropped while slow was running.*not sent again/);
    const lines = journalOf(file);
    expect(lines.filter((l) => l.startsWith('started'))).toHaveLength(1);
    expect(lines).toContain(`record after ${intentOf(log, 'r1')!.idempotencyKey}`);
    expect(made).toHaveLength(2);
    // the reconnect listed the server's tools again: the new list (a tool added) is in the profile
    expect(runtime.executionProfileFingerprint).not.toBe(before);
    await session.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'again' });
    const starts = (await events(store)).filter((e) => e.type === 'run/start').map((e) => e.payload.executionProfileFingerprint);
    expect(starts).toEqual([before, runtime.executionProfileFingerprint]);
    // and the next attempt is offered the tool the reconnected server added
    expect(model.requests.at(-1)!.tools.map((t) => t.name)).toContain('extra');
    await runtime.close();
  });

  it('reconcile decides the outcome of a dropped exclusive call (with the idempotency key and a reconnected client)', async () => {
    const file = journal();
    const made: (Client & { pid: number | null })[] = [];
    const factory = async () => {
      const c = await stdio({ MCP_TEST_JOURNAL: file });
      made.push(c);
      return c;
    };
    const asked: { tool: string; key: string; tools: number }[] = [];
    const tools = await mcpTools(factory, {
      reconcile: async (call) => {
        asked.push({ tool: call.tool, key: call.idempotencyKey, tools: (await call.client!.listTools()).tools.length });
        return { kind: 'completed', content: `checked ${call.idempotencyKey}: it ran` };
      },
    });
    const store = memoryStore();
    const runtime = createRuntime({
      store,
      model: scriptedModel([{ toolCalls: [{ id: 's1', name: 'slow', arguments: { ms: 60_000 } }] }, 'done']),
      tools,
    });
    const session = await runtime.openSession('s1');
    const running = session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    await until(() => journalOf(file).some((l) => l.startsWith('started')), 'the slow call to start');
    process.kill(made[0]!.pid!, 'SIGKILL');
    await running;
    const log = await events(store);
    const key = intentOf(log, 's1')!.idempotencyKey;
    expect(asked).toEqual([{ tool: 'slow', key, tools: 4 }]);
    expect(resultOf(log, 's1')).toMatchObject({ kind: 'completed', content: `checked ${key}: it ran` });
    // the same hook serves recovery (a process that died mid-call): the tool's own reconcile
    const slow = tools.find((t) => t.name === 'slow')!;
    const ctx = {
      signal: new AbortController().signal,
      idempotencyKey: 'k-recovery',
      sessionId: 's1',
      runId: 'r1',
      callId: 's1',
      emit: () => {},
    };
    expect(await slow.reconcile!({ ms: 1 }, ctx)).toMatchObject({ content: 'checked k-recovery: it ran' });
    await runtime.close();
  });

  it('a parallel call whose connection drops is sent again on a new connection', async () => {
    const file = journal();
    const made: (Client & { pid: number | null })[] = [];
    const factory = async () => {
      const c = await stdio({ MCP_TEST_JOURNAL: file });
      made.push(c);
      return c;
    };
    const store = memoryStore();
    const runtime = createRuntime({
      store,
      model: scriptedModel([{ toolCalls: [{ id: 'p1', name: 'slow', arguments: { ms: 1500 } }] }, 'done']),
      tools: await mcpTools(factory, { parallel: ['slow'] }),
    });
    const session = await runtime.openSession('s1');
    const running = session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    await until(() => journalOf(file).some((l) => l.startsWith('started')), 'the slow call to start');
    process.kill(made[0]!.pid!, 'SIGKILL');
    await running;
    expect(resultOf(await events(store), 'p1')).toMatchObject({ kind: 'completed', content: 'slept', isError: false });
    expect(journalOf(file).filter((l) => l.startsWith('started'))).toHaveLength(2);
    await runtime.close();
  });

  it("honours the run's timeout: the server is told to stop, and the exclusive call is cancelled, not settled", async () => {
    const file = journal();
    const client = await stdio({ MCP_TEST_JOURNAL: file });
    const store = memoryStore();
    const runtime = createRuntime({
      store,
      model: scriptedModel([{ toolCalls: [{ id: 's1', name: 'slow', arguments: { ms: 60_000 } }] }, 'done']),
      tools: await mcpTools(client, { timeoutMs: scaled(400) }),
    });
    const session = await runtime.openSession('s1');
    await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    expect(resultOf(await events(store), 's1')).toMatchObject({ kind: 'cancelled', settled: false });
    // notifications/cancelled reached the server: its handler's signal aborted and it returned early
    await until(() => journalOf(file).some((l) => l.startsWith('finished')), 'the server to stop the call');
    await runtime.close();
  });
});

describe("mcpTools and the run's cancel", () => {
  it('a cancel aborts the request: the server stops, the exclusive call is cancelled, not settled', async () => {
    const file = journal();
    const client = await stdio({ MCP_TEST_JOURNAL: file });
    const store = memoryStore();
    const runtime = createRuntime({
      store,
      model: scriptedModel([{ toolCalls: [{ id: 's1', name: 'slow', arguments: { ms: 60_000 } }] }, 'done']),
      tools: await mcpTools(client),
    });
    const session = await runtime.openSession('s1');
    const running = session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    await until(() => journalOf(file).some((l) => l.startsWith('started')), 'the slow call to start');
    await session.requestCancel();
    expect((await running).status).toBe('cancelled');
    expect(resultOf(await events(store), 's1')).toMatchObject({ kind: 'cancelled', settled: false });
    await until(() => journalOf(file).some((l) => l.startsWith('finished')), 'the server to stop the call');
    await runtime.close();
  });
});

describe('mcpTools over Streamable HTTP on loopback', () => {
  it('a call killed mid-call is uncertain; after the server restarts, the adapter starts a new session and the next call runs once', async () => {
    const file = journal();
    const first = await httpServer(0, { MCP_TEST_JOURNAL: file });
    const port = first.port;
    const factory = async () => {
      const c = await httpClient(port);
      clients.push(c);
      return c;
    };
    const store = memoryStore();
    const model = scriptedModel([
      { toolCalls: [{ id: 's1', name: 'slow', arguments: { ms: 60_000 } }] },
      'first done',
      { toolCalls: [{ id: 'r1', name: 'record', arguments: { note: 'x' } }] },
      'second done',
    ]);
    const runtime = createRuntime({ store, model, tools: await mcpTools(factory) });
    const session = await runtime.openSession('s1');
    const running = session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' });
    await until(() => journalOf(file).some((l) => l.startsWith('started')), 'the slow call to start');
    first.child.signal('SIGKILL');
    await running;
    let log = await events(store);
    expect(resultOf(log, 's1')).toMatchObject({ kind: 'uncertain-hanging' });
    // a new server process on the same port: the old session id gets 404, a new session is made
    await first.child.exited;
    await httpServer(port, { MCP_TEST_JOURNAL: file });
    await session.execute({ kind: 'prompt', runId: 'r2', attemptId: 'a1', message: 'again' });
    log = await events(store);
    expect(resultOf(log, 'r1')).toMatchObject({ kind: 'completed', content: 'recorded x' });
    const lines = journalOf(file);
    expect(lines.filter((l) => l.startsWith('started'))).toHaveLength(1);
    expect(lines.filter((l) => l.startsWith('record'))).toEqual([`record x ${intentOf(log, 'r1')!.idempotencyKey}`]);
    await runtime.close();
  });

  it('a server restarted between calls (its session gone: 404) is reconnected and the call is sent once', async () => {
    const file = journal();
    const first = await httpServer(0, { MCP_TEST_JOURNAL: file });
    const made: Client[] = [];
    const tools = await mcpTools(async () => {
      const c = await httpClient(first.port);
      clients.push(c);
      made.push(c);
      return c;
    });
    first.child.signal('SIGKILL');
    await first.child.exited;
    await httpServer(first.port, { MCP_TEST_JOURNAL: file });
    const record = tools.find((t) => t.name === 'record')!;
    const ctx = { signal: new AbortController().signal, idempotencyKey: 'k1', sessionId: 's', runId: 'r', callId: 'c', emit: () => {} };
    expect(await record.execute({ note: 'once' }, ctx)).toMatchObject({ kind: 'completed', content: 'recorded once', isError: false });
    expect(journalOf(file)).toEqual(['record once k1']);
    expect(made).toHaveLength(2);
  });
});

// The SDK's client checks a result against the MCP schema of a tool result, and `callTool` against
// the output schema the tool declares, and throws when it does not match — after the server ran
// the call (test/tools/mcp/server.ts, MCP_TEST_VARIANT=outputs).
describe.each(['exclusive', 'parallel'] as const)('a result outside a schema (%s)', (mode) => {
  it.each([
    [
      "structured content that does not match the tool's output schema",
      'charge',
      /does not match the output schema charge declares: data\/id must be string/,
    ],
    ['no structured content, though the tool declares an output schema', 'charge_plain', /no structured content/],
    ['a content block of a type MCP does not define', 'charge_block', /does not fit the MCP schema of a tool result: content\.1/],
    ['structured content that is not an object', 'charge_list', /does not fit the MCP schema of a tool result: structuredContent/],
  ])(
    "a result with %s is the call's result: it ran once, is not refused, and the model reads its text and the mismatch",
    async (_, tool, mismatch) => {
      const file = journal();
      const made: Client[] = [];
      const factory = async () => {
        const c = await stdio({ MCP_TEST_JOURNAL: file, MCP_TEST_VARIANT: 'outputs' });
        made.push(c);
        return c;
      };
      const store = memoryStore();
      const model = scriptedModel([{ toolCalls: [{ id: 'c1', name: tool, arguments: { note: '$100' } }] }, 'done']);
      const tools = await mcpTools(factory, mode === 'parallel' ? { parallel: [tool] } : {});
      const runtime = createRuntime({ store, model, tools });
      const session = await runtime.openSession('s1');
      expect((await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'go' })).status).toBe('succeeded');
      const log = await events(store);
      expect(intentOf(log, 'c1')!.mode).toBe(mode);
      // the server ran it once, and it was not sent again (no second connection, no second call)
      expect(journalOf(file)).toEqual([`${tool} $100 ${intentOf(log, 'c1')!.idempotencyKey}`]);
      expect(made).toHaveLength(1);
      const outcome = resultOf(log, 'c1')!;
      expect(outcome).toMatchObject({ kind: 'completed', isError: false });
      const content = String(outcome.content);
      expect(content).toMatch(/^charged \$100\n/);
      expect(content).toMatch(mismatch);
      expect(content).toMatch(/the call ran/);
      expect(content).not.toMatch(/refused|not sent|did not run/);
      if (tool === 'charge') expect(outcome.structured).toEqual({ id: 5 });
      if (tool === 'charge_list') expect(outcome.structured).toEqual([1, 2]);
      const told = model.requests[1]!.messages.find((m) => m.role === 'tool')!;
      expect(JSON.stringify(told.content)).toContain('charged $100');
      await runtime.close();
    },
  );
});
