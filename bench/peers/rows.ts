/**
 * The rows of the peer benchmark: each sets up one system for one workload variant and returns
 * `rep()`, which runs the variant's sessions once and throws unless every session ended with the
 * scripted model's answer (the model itself checks every tool result on the way, workload.ts).
 * Each row is run in a process of its own by run.ts (via row.ts).
 */
import { closeSync, fdatasyncSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { checkAnswer, decide, pool, sleep, toolValue, type ToolName, type Variant } from './workload.js';

export type Row = { rep: (n: number) => Promise<void>; close: () => Promise<void> };
export type RowFactory = (v: Variant, dir: string) => Promise<Row | { skip: string }>;

// ---------------------------------------------------------------- actorloop (imported as an app does)
async function actorloopRow(v: Variant, store: () => Promise<{ store: unknown; close: () => Promise<void> }>): Promise<Row> {
  const al = await import('../../dist/index.js');
  const tools = (['lookup', 'write'] as const).map((name) =>
    al.defineTool({
      name,
      description: name === 'lookup' ? 'side-effect free lookup' : 'a write',
      mode: name === 'lookup' ? 'parallel' : 'exclusive',
      parameters: z.object({ i: z.number() }),
      execute: async ({ i }: { i: number }) => {
        if (v.toolMs) await sleep(v.toolMs);
        return toolValue(name, i);
      },
    }),
  );
  const model: import('../../dist/index.js').ModelProvider = {
    modelId: 'scripted-checking',
    async call(request) {
      if (v.modelMs) await sleep(v.modelMs);
      const d = decide(
        v.k,
        request.messages.filter((m) => m.role === 'tool').map((m) => ({ text: m.content })),
      );
      if (d.kind === 'answer')
        return { message: { role: 'assistant', content: d.text }, usage: { inputTokens: 1, outputTokens: 1 }, finishReason: 'stop' };
      return {
        message: {
          role: 'assistant',
          content: '',
          toolCalls: d.calls.map((c) => ({ id: c.id, name: c.name, arguments: JSON.stringify({ i: c.i }) })),
        },
        usage: { inputTokens: 1, outputTokens: 1 },
        finishReason: 'tool_calls',
      };
    },
  };
  const s = await store();
  const runtime = al.createRuntime({
    store: s.store as import('../../dist/index.js').EventStore,
    model,
    tools,
    budget: { maxSteps: v.k + 1 },
    config: { contextWindow: 10_000_000 },
  });
  return {
    async rep(n) {
      await pool(v.sessions, v.inFlight, async (i) => {
        const id = `s${n}-${i}`;
        const session = await runtime.openSession(id);
        const r = await session.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' });
        if (r.status !== 'succeeded' || r.steps !== v.k)
          throw new Error(`actorloop session ${id}: ${r.status} after ${r.steps} steps: ${r.error?.message ?? ''}`);
        checkAnswer(v.k, r.finalMessage, id);
        await session.close();
      });
    },
    close: s.close,
  };
}

const actorloopMemory: RowFactory = async (v) =>
  actorloopRow(v, async () => {
    const al = await import('../../dist/index.js');
    const store = al.memoryStore();
    return { store, close: () => store.close() };
  });

const actorloopLmdb: RowFactory = async (v, dir) =>
  actorloopRow(v, async () => {
    const al = await import('../../dist/index.js');
    const store = al.lmdbStore({ path: join(dir, 'actorloop-lmdb') }); // durability 'flushed' (the default)
    return { store, close: () => store.close() };
  });

const PG_ADMIN = process.env.ACTORLOOP_BENCH_POSTGRES ?? 'postgresql://postgres@127.0.0.1:5432/postgres';

const actorloopPostgres: RowFactory = async (v) => {
  let pg: typeof import('pg');
  try {
    pg = (await import('pg')).default as unknown as typeof import('pg');
  } catch {
    return { skip: 'the `pg` package is not installed' };
  }
  const admin = new pg.Client({ connectionString: PG_ADMIN, connectionTimeoutMillis: 3000 });
  try {
    await admin.connect();
  } catch (e) {
    return { skip: `no PostgreSQL at ${PG_ADMIN.replace(/\/\/[^@]*@/, '//')} (${(e as Error).message})` };
  }
  const db = `actorloop_bench_peers_${process.pid}`;
  await admin.query(`CREATE DATABASE ${db}`);
  await admin.end();
  const drop = async () => {
    const c = new pg.Client({ connectionString: PG_ADMIN });
    await c.connect();
    await c.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    await c.end();
  };
  try {
    return await actorloopRow(v, async () => {
      const al = await import('../../dist/index.js');
      const store = al.postgresStore({
        connectionString: PG_ADMIN.replace(/\/[^/]*$/, `/${db}`),
        maxConnections: Math.max(4, v.inFlight + 2),
      });
      return {
        store,
        close: async () => {
          await store.close();
          await drop();
        },
      };
    });
  } catch (e) {
    await drop();
    throw e;
  }
};

// ---------------------------------------------------------------- LangGraph.js
async function langgraphRow(v: Variant, saver: 'memory' | 'sqlite', dir: string): Promise<Row> {
  const { StateGraph, MessagesAnnotation, START, END, MemorySaver } = await import('@langchain/langgraph');
  const { ToolNode, toolsCondition } = await import('@langchain/langgraph/prebuilt');
  const { tool } = await import('@langchain/core/tools');
  const { AIMessage } = await import('@langchain/core/messages');
  const tools = (['lookup', 'write'] as const).map((name) =>
    tool(
      async ({ i }: { i: number }) => {
        if (v.toolMs) await sleep(v.toolMs);
        return toolValue(name, i);
      },
      { name, description: name, schema: z.object({ i: z.number() }) },
    ),
  );
  const agent = async (state: typeof MessagesAnnotation.State) => {
    if (v.modelMs) await sleep(v.modelMs);
    const results = state.messages
      .filter((m) => m.getType() === 'tool')
      .map((m) => ({ text: typeof m.content === 'string' ? m.content : JSON.stringify(m.content) }));
    const d = decide(v.k, results);
    if (d.kind === 'answer') return { messages: [new AIMessage({ content: d.text })] };
    return {
      messages: [
        new AIMessage({
          content: '',
          tool_calls: d.calls.map((c) => ({ id: c.id, name: c.name, args: { i: c.i }, type: 'tool_call' as const })),
        }),
      ],
    };
  };
  let checkpointer: InstanceType<typeof MemorySaver> | import('@langchain/langgraph-checkpoint-sqlite').SqliteSaver;
  if (saver === 'memory') checkpointer = new MemorySaver();
  else {
    const { SqliteSaver } = await import('@langchain/langgraph-checkpoint-sqlite');
    checkpointer = SqliteSaver.fromConnString(join(dir, 'langgraph.sqlite'));
  }
  const graph = new StateGraph(MessagesAnnotation)
    .addNode('agent', agent)
    .addNode('tools', new ToolNode(tools))
    .addEdge(START, 'agent')
    .addConditionalEdges('agent', toolsCondition, ['tools', END])
    .addEdge('tools', 'agent')
    .compile({ checkpointer });
  return {
    async rep(n) {
      await pool(v.sessions, v.inFlight, async (i) => {
        const id = `s${n}-${i}`;
        const out = await graph.invoke(
          { messages: [{ role: 'user', content: 'go' }] },
          { configurable: { thread_id: id }, recursionLimit: 2 * v.k + 10, durability: 'sync' },
        );
        const last = out.messages.at(-1);
        checkAnswer(v.k, typeof last?.content === 'string' ? last.content : undefined, id);
      });
    },
    async close() {
      if (saver === 'sqlite') (checkpointer as { db?: { close(): void } }).db?.close();
    },
  };
}

// ---------------------------------------------------------------- OpenAI Agents JS
const openaiAgents: RowFactory = async (v) => {
  const agents = await import('@openai/agents');
  agents.setTracingDisabled(true);
  const tools = (['lookup', 'write'] as const).map((name) =>
    agents.tool({
      name,
      description: name,
      parameters: z.object({ i: z.number() }),
      execute: async ({ i }: { i: number }) => {
        if (v.toolMs) await sleep(v.toolMs);
        return toolValue(name, i);
      },
    }),
  );
  const text = (output: unknown): string => {
    if (typeof output === 'string') return output;
    if (output && typeof output === 'object' && 'text' in output) return String((output as { text: unknown }).text);
    return JSON.stringify(output);
  };
  const model: import('@openai/agents').Model = {
    async getResponse(request) {
      if (v.modelMs) await sleep(v.modelMs);
      const items = typeof request.input === 'string' ? [] : request.input;
      const results = items
        .filter((it) => it.type === 'function_call_result')
        .map((it) => ({ text: text((it as { output: unknown }).output) }));
      const d = decide(v.k, results);
      const usage = new agents.Usage({ requests: 1, inputTokens: 1, outputTokens: 1, totalTokens: 2 });
      if (d.kind === 'answer') {
        return {
          usage,
          responseId: undefined,
          output: [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: d.text }] }],
        };
      }
      return {
        usage,
        responseId: undefined,
        output: d.calls.map((c) => ({
          type: 'function_call' as const,
          callId: c.id,
          name: c.name,
          arguments: JSON.stringify({ i: c.i }),
          status: 'completed' as const,
        })),
      };
    },
    // eslint-disable-next-line require-yield
    async *getStreamedResponse() {
      throw new Error('the bench does not stream');
    },
  };
  const agent = new agents.Agent({ name: 'bench', instructions: 'use the tools', model, tools });
  return {
    async rep(n) {
      await pool(v.sessions, v.inFlight, async (i) => {
        const r = await agents.run(agent, 'go', { maxTurns: v.k + 1 });
        checkAnswer(v.k, typeof r.finalOutput === 'string' ? r.finalOutput : undefined, `s${n}-${i}`);
      });
    },
    close: async () => {},
  };
};

// ---------------------------------------------------------------- Vercel AI SDK
const vercelAi: RowFactory = async (v) => {
  const ai = await import('ai');
  const tools = {
    lookup: ai.tool({
      description: 'lookup',
      inputSchema: z.object({ i: z.number() }),
      execute: async ({ i }) => {
        if (v.toolMs) await sleep(v.toolMs);
        return toolValue('lookup', i);
      },
    }),
    write: ai.tool({
      description: 'write',
      inputSchema: z.object({ i: z.number() }),
      execute: async ({ i }) => {
        if (v.toolMs) await sleep(v.toolMs);
        return toolValue('write', i);
      },
    }),
  };
  const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
  // a LanguageModelV4 of our own (ai/test's MockLanguageModelV4 keeps every call it was given)
  const model: import('@ai-sdk/provider').LanguageModelV4 = {
    specificationVersion: 'v4',
    provider: 'bench',
    modelId: 'scripted-checking',
    supportedUrls: {},
    async doGenerate(options) {
      if (v.modelMs) await sleep(v.modelMs);
      const results: { text: string }[] = [];
      for (const m of options.prompt) {
        if (m.role !== 'tool') continue;
        for (const p of m.content) {
          if (p.type !== 'tool-result') continue;
          const o = p.output;
          results.push({ text: o.type === 'text' ? o.value : o.type === 'json' ? JSON.stringify(o.value) : JSON.stringify(o) });
        }
      }
      const d = decide(v.k, results);
      if (d.kind === 'answer')
        return { content: [{ type: 'text', text: d.text }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] };
      return {
        content: d.calls.map((c) => ({
          type: 'tool-call' as const,
          toolCallId: c.id,
          toolName: c.name,
          input: JSON.stringify({ i: c.i }),
        })),
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
        usage,
        warnings: [],
      };
    },
    async doStream() {
      throw new Error('the bench does not stream');
    },
  };
  return {
    async rep(n) {
      await pool(v.sessions, v.inFlight, async (i) => {
        const r = await ai.generateText({ model, tools, prompt: 'go', stopWhen: ai.stepCountIs(v.k) });
        checkAnswer(v.k, r.text, `s${n}-${i}`);
      });
    },
    close: async () => {},
  };
};

// ---------------------------------------------------------------- bare loop (and + fsync)
type Msg = { role: 'user' | 'assistant' | 'tool'; content: string; name?: ToolName; calls?: { id: string; name: ToolName; i: number }[] };

function bareRow(v: Variant, journal?: string): Row {
  const fd = journal === undefined ? undefined : openSync(journal, 'a');
  const toolFns: Record<ToolName, (i: number) => Promise<string>> = {
    lookup: async (i) => {
      if (v.toolMs) await sleep(v.toolMs);
      return toolValue('lookup', i);
    },
    write: async (i) => {
      if (v.toolMs) await sleep(v.toolMs);
      return toolValue('write', i);
    },
  };
  const session = async (id: string) => {
    const history: Msg[] = [{ role: 'user', content: 'go' }];
    for (;;) {
      if (v.modelMs) await sleep(v.modelMs);
      const d = decide(
        v.k,
        history.filter((m) => m.role === 'tool').map((m) => ({ text: m.content })),
        id,
      );
      if (d.kind === 'answer') {
        history.push({ role: 'assistant', content: d.text });
        if (fd !== undefined) {
          writeSync(fd, `${JSON.stringify({ session: id, step: history.length, message: history.at(-1) })}\n`);
          fdatasyncSync(fd);
        }
        checkAnswer(v.k, d.text, id);
        return;
      }
      const assistant: Msg = { role: 'assistant', content: '', calls: d.calls };
      history.push(assistant);
      const results = await Promise.all(
        d.calls.map(async (c): Promise<Msg> => ({ role: 'tool', name: c.name, content: await toolFns[c.name](c.i) })),
      );
      history.push(...results);
      // one fsync'd JSON line per step: the step's assistant message and its tool results
      if (fd !== undefined) {
        writeSync(fd, `${JSON.stringify({ session: id, step: d.step, messages: [assistant, ...results] })}\n`);
        fdatasyncSync(fd);
      }
    }
  };
  return {
    async rep(n) {
      await pool(v.sessions, v.inFlight, (i) => session(`s${n}-${i}`));
    },
    close: async () => {
      if (fd !== undefined) {
        closeSync(fd);
        rmSync(journal!, { force: true });
      }
    },
  };
}

export const ROWS: ReadonlyMap<string, { label: string; durable: boolean; make: RowFactory }> = new Map([
  ['actorloop-lmdb', { label: 'actorloop, LMDB (flushed)', durable: true, make: actorloopLmdb }],
  ['actorloop-postgres', { label: 'actorloop, PostgreSQL', durable: true, make: actorloopPostgres }],
  ['actorloop-memory', { label: 'actorloop, memory store', durable: false, make: actorloopMemory }],
  [
    'langgraph-sqlite',
    { label: "LangGraph.js + SqliteSaver (durability 'sync')", durable: true, make: (v, d) => langgraphRow(v, 'sqlite', d) },
  ],
  ['langgraph-memory', { label: 'LangGraph.js + MemorySaver', durable: false, make: (v, d) => langgraphRow(v, 'memory', d) }],
  ['openai-agents', { label: 'OpenAI Agents JS (scripted Model)', durable: false, make: openaiAgents }],
  ['vercel-ai', { label: 'Vercel AI SDK generateText + stopWhen', durable: false, make: vercelAi }],
  ['bare', { label: 'bare loop', durable: false, make: async (v) => bareRow(v) }],
  [
    'bare-fsync',
    { label: "bare loop + 1 fsync'd JSON-line append per step", durable: true, make: async (v, d) => bareRow(v, join(d, 'bare.jsonl')) },
  ],
]);
