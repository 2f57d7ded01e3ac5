import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { anthropicModel, defineTool, openaiModel, openaiResponsesModel, type ModelProvider } from '../../src/index.js';
import { backends, PROTO_KEYS, within } from '../helpers/backends.js';
import { logOf } from '../helpers/runtime.js';
import { an } from './anthropic-server.js';
import { oa } from './openai-server.js';
import { rs } from './responses-server.js';
import type { Reply, ScriptedServer } from './sse-server.js';
import { providerServers } from './provider-servers.js';

/**
 * Outside data is never a property name, over the wire: the real `openai` (Chat Completions and
 * Responses) and `@anthropic-ai/sdk` clients against the local servers, with tool call ids, tool names and
 * argument keys such as `"id":"constructor"`, on both stores.
 */

const { openai: oaServer, anthropic: anServer, responses: rsServer } = providerServers();

interface Wire {
  server: () => ScriptedServer;
  model: () => ModelProvider;
  /** One reply with these tool calls (ids, names, argument text). */
  calls: (calls: { id: string; name: string; args: string }[]) => Reply;
  text: (t: string) => Reply;
}

const wires: Record<'openai' | 'responses' | 'anthropic', Wire> = {
  openai: {
    server: () => oaServer,
    model: () => openaiModel({ client: new OpenAI({ apiKey: 'test', baseURL: oaServer.baseURL }), model: 'gpt-test' }),
    calls: (calls) =>
      oa.stream([
        oa.role(),
        ...calls.map((c, i) => oa.tool(i, c.args, { id: c.id, name: c.name })),
        oa.finish('tool_calls'),
        oa.usage(10, 5),
      ]),
    text: (t) => oa.textReply([t]),
  },
  responses: {
    server: () => rsServer,
    model: () => openaiResponsesModel({ client: new OpenAI({ apiKey: 'test', baseURL: rsServer.baseURL }), model: 'gpt-test' }),
    calls: (calls) => {
      const items = calls.map((c, i) => rs.call(`fc_${i}`, c.id, c.name, c.args));
      return rs.stream([rs.created(), ...items.flatMap((item, i) => [rs.added(i, item), rs.done(i, item)]), rs.completed(items)]);
    },
    text: (t) => rs.textReply([t]),
  },
  anthropic: {
    server: () => anServer,
    model: () =>
      anthropicModel({ client: new Anthropic({ apiKey: 'test', baseURL: anServer.baseURL }), model: 'claude-test', maxTokens: 1024 }),
    calls: (calls) =>
      an.stream([
        an.start(),
        ...calls.flatMap((c, i) => [an.toolStart(i, c.id, c.name), an.json(i, c.args), an.blockStop(i)]),
        an.messageDelta('tool_use'),
        an.stop(),
      ]),
    text: (t) => an.textReply([t]),
  },
};

const SETTLE_MS = 10_000;

describe.each(['openai', 'responses', 'anthropic'] as const)('outside keys over the %s wire', (wireName) => {
  const wire = wires[wireName];

  it.each(['memory', 'lmdb'] as const)(
    'call ids and tool names named like prototype properties settle, one result each (%s store)',
    async (kind) => {
      const ran: string[] = [];
      const tools = ['constructor', 'toString', 'echo'].map((name) =>
        defineTool({
          name,
          description: 'a tool',
          mode: 'parallel',
          parameters: z.object({ valueOf: z.string().optional() }),
          execute: (a, ctx) => (ran.push(`${name}:${ctx.callId}`), `${name} ${a.valueOf ?? ''}`),
        }),
      );
      const calls = PROTO_KEYS.map((id, i) => ({
        id,
        name: ['constructor', 'toString', 'echo'][i % 3]!,
        args: '{"valueOf":"v","__proto__":{"polluted":1}}',
      }));
      wire.server().reply(wire.calls(calls), wire.text('done'));
      const rt = backends[kind]().rt({ model: wire.model(), tools });
      const s = await rt.openSession('s');
      const r = await within(s.execute({ kind: 'prompt', runId: 'r', attemptId: 'a', message: 'go' }), SETTLE_MS, 'execute');
      expect(r).toMatchObject({ status: 'succeeded', finalMessage: 'done' });
      expect(ran.sort()).toEqual(calls.map((c) => `${c.name}:${c.id}`).sort());
      const log = await logOf(rt.store, 's');
      expect(log.filter((e) => e.type === 'tool/result').map((e) => e.payload.callId)).toEqual([...PROTO_KEYS]);
      expect(({} as { polluted?: number }).polluted).toBeUndefined();
      // the second request sends every result back under its own call id
      const body = JSON.stringify(wire.server().requests.at(-1)!.body);
      for (const id of PROTO_KEYS) expect(body).toContain(JSON.stringify(id));
    },
  );

  it.each(['memory', 'lmdb'] as const)(
    'approvals of such call ids over the wire, then a crash, reopen and continue (%s store)',
    async (kind) => {
      const b = backends[kind]();
      const ran: string[] = [];
      const pay = defineTool({
        name: 'pay',
        description: 'pays',
        mode: 'exclusive',
        needsApproval: true,
        parameters: z.object({}),
        execute: (_a, ctx) => (ran.push(ctx.callId), 'paid'),
      });
      wire.server().reply(
        wire.calls([
          { id: 'constructor', name: 'pay', args: '{}' },
          { id: 'hasOwnProperty', name: 'pay', args: '{}' },
        ]),
        wire.text('paid one'),
      );
      const rt1 = b.rt({ model: wire.model(), tools: [pay] });
      const s1 = await rt1.openSession('s');
      const r1 = await within(s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'pay' }), SETTLE_MS, 'prompt');
      expect(r1.pendingRequest).toMatchObject({ kind: 'approval', calls: [{ callId: 'constructor' }, { callId: 'hasOwnProperty' }] });
      b.abandon(rt1); // the process dies while suspended
      const rt2 = b.rt({ model: wire.model(), tools: [pay] });
      const s2 = await rt2.openSession('s');
      expect(s2.recovery.interruptedRuns).toMatchObject([{ runId: 'r', pendingRequest: { kind: 'approval' } }]);
      const answer = { decisions: { constructor: 'approve' } };
      const r2 = await within(
        s2.execute({ kind: 'respond', runId: 'r', attemptId: 'a2', questionId: r1.pendingRequest!.questionId, answer }),
        SETTLE_MS,
        'respond',
      );
      expect(r2).toMatchObject({ status: 'succeeded', finalMessage: 'paid one' });
      expect(ran).toEqual(['constructor']);
      const results = (await logOf(rt2.store, 's'))
        .filter((e) => e.type === 'tool/result')
        .map((e) => [e.payload.callId, (e.payload.outcome as { isError?: boolean }).isError]);
      expect(results.sort()).toEqual([
        ['constructor', false],
        ['hasOwnProperty', true],
      ]);
    },
  );
});
