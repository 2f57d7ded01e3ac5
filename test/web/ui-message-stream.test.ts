import { DefaultChatTransport, type UIMessage } from 'ai';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createRuntime,
  isValidationError,
  defineTool,
  memoryStore,
  scriptedModel,
  lmdbStore,
  uiMessageStream,
  webHandler,
  type AuthorizeContext,
  type EventStore,
} from '../../src/index.js';
import { deferred } from '../helpers/drafts.js';
import { storeWithAppend } from '../helpers/runtime.js';
import { tempDir } from '../helpers/tmp.js';
import { chatPost, chunksOf, draft, drain, plain, uiChunks } from './chat-fixtures.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const deploy = defineTool({
  name: 'deploy',
  description: 'deploys',
  parameters: z.object({ env: z.string() }),
  mode: 'exclusive',
  execute: ({ env }) => `deployed to ${env}`,
});

function make(authorize?: (req: Request, ctx: AuthorizeContext) => boolean | Response) {
  const runtime = createRuntime({
    store: memoryStore(),
    model: scriptedModel(
      [{ text: 'deploying', toolCalls: [{ id: 'c1', name: 'deploy', arguments: { env: 'staging' } }] }, 'Deployed to staging.'],
      { loop: true },
    ),
    tools: [deploy],
    approvalFor: ['deploy'],
  });
  cleanups.push(() => runtime.close());
  const handle = webHandler({ runtime, basePath: '/api', ...(authorize ? { authorize } : {}) });
  const fetch = ((url: string | URL | Request, init?: RequestInit) =>
    handle(new Request(new URL(String(url), 'http://app'), init))) as typeof globalThis.fetch;
  return { runtime, handle, fetch, transport: new DefaultChatTransport({ api: 'http://app/api/chat', fetch }) };
}

describe("the AI SDK routes, driven by the AI SDK's own DefaultChatTransport", () => {
  it('a prompt streams its reply to the approval request; the resume route has nothing while it waits (204); the approval responses continue the same message to the answer; the history is that message', async () => {
    const { runtime, fetch, transport } = make();
    const worker = runtime.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    cleanups.push(() => worker.stop({ graceMs: 100 }));
    const user: UIMessage = { id: 'm1', role: 'user', parts: [{ type: 'text', text: 'deploy it' }] };
    const first = await drain(
      await transport.sendMessages({
        chatId: 's1',
        messages: [user],
        trigger: 'submit-message',
        messageId: undefined,
        abortSignal: undefined,
      }),
    );
    expect(first.id).toBe('m1-reply');
    const tool = first.parts.find((p) => p.type === 'tool-deploy') as { state: string; approval: { id: string } };
    expect(tool.state).toBe('approval-requested');
    expect((await fetch('http://app/api/chat/s1/stream')).status).toBe(204);
    expect(plain(await (await fetch('http://app/api/chat/s1/messages')).json())).toEqual(plain([user, first]));

    const answered = structuredClone(first);
    for (const p of answered.parts as { state?: string; approval?: { approved?: boolean } }[])
      if (p.state === 'approval-requested') Object.assign(p, { state: 'approval-responded', approval: { ...p.approval, approved: true } });
    const second = await drain(
      await transport.sendMessages({
        chatId: 's1',
        messages: [user, answered],
        trigger: 'submit-message',
        messageId: answered.id,
        abortSignal: undefined,
      }),
      answered,
    );
    expect(second.id).toBe('m1-reply');
    expect(second.parts.filter((p) => p.type === 'tool-deploy')).toHaveLength(1); // continued, not announced again
    expect((second.parts.find((p) => p.type === 'tool-deploy') as { state: string }).state).toBe('output-available');
    expect(second.parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text)).toEqual([
      'deploying',
      'Deployed to staging.',
    ]);
    const history = plain(await (await fetch('http://app/api/chat/s1/messages')).json()) as UIMessage[];
    expect(history).toEqual(plain([user, second]));
    const log: string[] = [];
    for await (const r of runtime.store.readEvents('s1')) log.push(r.type);
    expect(log.filter((t) => t === 'approval/decided')).toHaveLength(1);
  });

  it('a new message while the run waits for the approval is a 409 AwaitingResponse naming the call, with nothing submitted; the waiting message sent again still streams its reply', async () => {
    const { runtime, handle, transport } = make();
    const worker = runtime.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    cleanups.push(() => worker.stop({ graceMs: 100 }));
    const user: UIMessage = { id: 'm1', role: 'user', parts: [{ type: 'text', text: 'deploy it' }] };
    const send = { chatId: 's1', trigger: 'submit-message', messageId: undefined, abortSignal: undefined } as const;
    const first = await drain(await transport.sendMessages({ ...send, messages: [user] }));
    const next: UIMessage = { id: 'm2', role: 'user', parts: [{ type: 'text', text: 'and the docs?' }] };
    const res = await handle(chatPost({ id: 's1', messages: [user, first, next], trigger: 'submit-message' }));
    expect(res.status).toBe(409);
    expect(await res.json()).toMatchObject({
      error: 'AwaitingResponse',
      message: expect.stringContaining('waits for the approval of deploy (c1)'),
      pendingRequest: { kind: 'approval', calls: [{ callId: 'c1' }] },
    });
    expect(await runtime.store.work!.getEntry('s1', 'm2')).toBeUndefined();
    // the message the run answers, sent again (its response lost): its reply, to the same approval request
    const again = await drain(await transport.sendMessages({ ...send, messages: [user] }));
    expect(plain(again)).toEqual(plain(first));
  });

  it('the POST body is checked (strict: id, messages, trigger, messageId) and a refused one submits nothing; authorize is asked with the action the body carries', async () => {
    const asked: string[] = [];
    const { runtime, handle } = make((_req, { action, route, sessionId }) => {
      asked.push(`${action} ${route} ${sessionId}`);
      return sessionId !== 'locked';
    });
    const user = { id: 'm1', role: 'user', parts: [{ type: 'text', text: 'hi' }] };
    const bad = [
      { id: 's1', messages: [user], trigger: 'submit-message', extra: 1 },
      { id: 's1', messages: [user], trigger: 'regenerate-message' },
      { id: 's1', messages: [{ ...user, parts: [{ type: 'file', url: 'data:,', mediaType: 'text/plain' }] }], trigger: 'submit-message' },
      { id: 's1', messages: [{ ...user, id: 'has space' }], trigger: 'submit-message' },
      { id: 's1', messages: [{ id: 'a', role: 'assistant', parts: [{ type: 'text', text: 'x' }] }], trigger: 'submit-message' },
      { id: 's1', messages: [], trigger: 'submit-message' },
    ];
    for (const body of bad) {
      const res = await handle(chatPost(body));
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(((await res.json()) as { error: string }).error).toBe('ValidationError');
    }
    expect(asked).toEqual([]); // refused before authorize
    expect((await handle(chatPost({ id: 'locked', messages: [user], trigger: 'submit-message' }))).status).toBe(403);
    expect((await handle(new Request('http://app/api/chat'))).status).toBe(405);
    expect((await handle(new Request('http://app/api/chat/s1/stream'))).status).toBe(204);
    expect((await handle(new Request('http://app/api/chat/s1/nope'))).status).toBe(404);
    const approval = {
      id: 's1',
      messages: [
        {
          id: 'a',
          role: 'assistant',
          parts: [{ type: 'tool-deploy', toolCallId: 'c1', state: 'approval-responded', approval: { id: 'x', approved: true } }],
        },
      ],
      trigger: 'submit-message',
    };
    expect((await handle(chatPost(approval))).status).toBe(409); // nothing waits for an approval
    expect(asked).toEqual(['submit chat locked', 'read stream s1', 'respond chat s1']);
    for (const id of ['s1', 'locked']) expect(await runtime.store.work!.pending(id)).toEqual([]);
  });

  it('a small body of many bad parts gets an answer of bounded size: 20 issues at most, the message saying how many more', async () => {
    const { runtime, handle } = make();
    const body = { id: 'amp', messages: Array.from({ length: 20_000 }, () => ({})), trigger: 'submit-message' };
    expect(JSON.stringify(body).length).toBeLessThan(100_000);
    const res = await handle(chatPost(body));
    expect(res.status).toBe(400);
    const text = await res.text();
    expect(text.length).toBeLessThan(20_000);
    const answer = JSON.parse(text) as { error: string; message: string; issues: unknown[] };
    expect(answer.error).toBe('ValidationError');
    expect(answer.issues).toHaveLength(20);
    expect(answer.message).toMatch(/; and \d+ more issues$/);
    expect(await runtime.store.getHead('amp')).toBeUndefined();
  });

  it('a chat id its own paths cannot name (., .., a lone surrogate) is refused, nothing submitted', async () => {
    const { runtime, handle } = make();
    for (const id of ['.', '..', '\ud800x']) {
      const res = await handle(
        chatPost({ id, messages: [{ id: 'm1', role: 'user', parts: [{ type: 'text', text: 'hi' }] }], trigger: 'submit-message' }),
      );
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ error: 'ValidationError', issues: [{ path: ['id'] }] });
      // a lone surrogate is no session id of any store: nothing can be pending under it
      if (id !== '.' && id !== '..')
        await expect(Promise.resolve().then(() => runtime.store.work!.pending(id))).rejects.toSatisfy(isValidationError);
      else expect(await runtime.store.work!.pending(id)).toEqual([]);
    }
  });

  it('a prompt submitted and not yet run ends the history, and the resume route streams its reply once a worker runs it', async () => {
    const { runtime, fetch, transport } = make();
    const user: UIMessage = { id: 'm1', role: 'user', parts: [{ type: 'text', text: 'deploy it' }] };
    const posted = await fetch('http://app/api/chat', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ id: 's1', messages: [user], trigger: 'submit-message' }),
    });
    await posted.body!.cancel(); // the page was closed right after sending
    expect(plain(await (await fetch('http://app/api/chat/s1/messages')).json())).toEqual(plain([user]));
    const resumed = await transport.reconnectToStream({ chatId: 's1', abortSignal: undefined });
    expect(resumed).not.toBeNull();
    const worker = runtime.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    cleanups.push(() => worker.stop({ graceMs: 100 }));
    const reply = await drain(resumed!);
    expect(reply.id).toBe('m1-reply');
    expect(plain(await (await fetch('http://app/api/chat/s1/messages')).json())).toEqual(plain([user, reply]));
  });

  it('GET /sessions lists the sessions authorize lets the request read, most recently written first; a Response from authorize is sent as it is', async () => {
    let signedIn = true;
    const { runtime, handle } = make((_req, { sessionId }) =>
      signedIn ? sessionId !== 'hidden' : new Response('sign in', { status: 401 }),
    );
    for (const id of ['a', 'hidden', 'b']) {
      await new Promise((r) => setTimeout(r, 5)); // a later write time for each (the list's order)
      const { writerEpoch } = await runtime.store.attachWriter(id);
      await runtime.store.append(id, writerEpoch, 1, [draft('step/start', {})]);
    }
    const res = await handle(new Request('http://app/api/sessions'));
    const { sessions } = (await res.json()) as { sessions: { sessionId: string; lastSeq: number; open: boolean }[] };
    expect(sessions.map((s) => s.sessionId)).toEqual(['b', 'a']);
    expect(sessions[0]).toMatchObject({ lastSeq: 1, open: false });
    expect((await handle(new Request('http://app/api/sessions?limit=0'))).status).toBe(400);
    signedIn = false;
    expect((await handle(new Request('http://app/api/sessions'))).status).toBe(401);
  });
});

describe('a run whose cancel stands waits for no approval', () => {
  it("after a crash cut a suspended run's cancelled end short, an approval POST is a 409 that submits nothing and the resume route has the reply (no 204); a cancel sent again ends the run cancelled, the tool never run", async () => {
    const dir = tempDir('actorloop-chat-cancel-');
    cleanups.push(() => dir.cleanup());
    const ran: string[] = [];
    const options = (store: EventStore) => ({
      store,
      model: scriptedModel([{ text: 'deploying', toolCalls: [{ id: 'c1', name: 'deploy', arguments: { env: 'prod' } }] }]),
      tools: [defineTool({ ...deploy, execute: ({ env }: { env: string }) => (ran.push(env), `deployed to ${env}`) })],
      approvalFor: ['deploy'],
    });
    // life 1: the run suspends for the approval; a cancel of it is recorded, and the process dies as its cancelled end commits
    const inner = lmdbStore({ path: dir.path });
    const ending = deferred();
    const rt1 = createRuntime(
      options(
        storeWithAppend(inner, async (id, epoch, seq, drafts) => {
          if (drafts.some((d) => d.type === 'run/end' && d.payload.status === 'cancelled')) {
            ending.resolve();
            return new Promise<never>(() => {});
          }
          return inner.append(id, epoch, seq, drafts);
        }),
      ),
    );
    const s1 = await rt1.openSession('s');
    expect(await s1.execute({ kind: 'prompt', runId: 'r', attemptId: 'a1', message: 'deploy it' })).toMatchObject({ status: 'suspended' });
    void s1.execute({ kind: 'continue', runId: 'r', attemptId: 'cancel' });
    await s1.requestCancel('not today');
    await ending.promise;

    // life 2 serves the page
    const runtime = createRuntime(options(lmdbStore({ path: dir.path })));
    cleanups.push(() => runtime.close());
    const handle = webHandler({ runtime, basePath: '/api' });
    const history = (await (await handle(new Request('http://app/api/chat/s/messages'))).json()) as UIMessage[];
    const answered = structuredClone(history.at(-1)!);
    const tool = answered.parts.find((p) => p.type === 'tool-deploy') as { state: string; approval: { id: string; approved?: boolean } };
    expect(tool.state).toBe('approval-requested'); // (the history shows what the log asked)
    Object.assign(tool, { state: 'approval-responded', approval: { ...tool.approval, approved: true } });
    const res = await handle(chatPost({ id: 's', messages: [...history.slice(0, -1), answered], trigger: 'submit-message' }));
    expect(res.status).toBe(409);
    expect(await res.json()).toMatchObject({ error: 'NothingToApprove', message: expect.stringContaining('run r was cancelled') });
    expect(await runtime.store.work!.pending('s')).toEqual([]);

    // the resume route does not answer "waiting" (204): it streams the reply to the end the next
    // attempt gives it — here the worker's, which claims the session for the user's cancel sent again
    const resumed = await handle(new Request('http://app/api/chat/s/stream'));
    expect(resumed.status).toBe(200);
    expect((await runtime.submit('s', { kind: 'cancel', entryId: 'cancel-again' })).status).toBe('accepted');
    const worker = runtime.serve({ concurrency: 1, leaseMs: 5000, pollMs: 20 });
    cleanups.push(() => worker.stop({ graceMs: 100 }));
    const chunks = (await chunksOf(resumed)).map((c) => c.chunk);
    expect(chunks).toContainEqual(
      expect.objectContaining({ type: 'data-actorloop-run', data: expect.objectContaining({ status: 'cancelled' }) }),
    );
    expect(chunks.at(-1)).toBe('[DONE]');
    const ends: unknown[] = [];
    for await (const r of runtime.store.readEvents('s')) if (r.type === 'run/end') ends.push(r.payload.status);
    expect(ends).toEqual(['suspended', 'cancelled']);
    expect(ran).toEqual([]);
  });
});

describe('a steer mid-run', () => {
  it("is shown in the reply the run's prompt opened: its stream goes on to the run's end with the answer, and the history's message is that one, its run part at the run's real end", async () => {
    const slow = defineTool({
      name: 'slow',
      description: 'takes its time',
      parameters: z.object({}),
      mode: 'parallel',
      execute: async () => (await new Promise((r) => setTimeout(r, 500)), 'slept'),
    });
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ toolCalls: [{ id: 's1', name: 'slow', arguments: {} }] }, 'changed course']),
      tools: [slow],
    });
    cleanups.push(() => runtime.close());
    const worker = runtime.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    cleanups.push(() => worker.stop({ graceMs: 100 }));
    const handle = webHandler({ runtime, basePath: '/api' });
    const user = { id: 'm1', role: 'user', parts: [{ type: 'text', text: 'go' }] };
    const res = await handle(chatPost({ id: 'st', messages: [user], trigger: 'submit-message' }));
    const reply = drain(uiChunks(res.body!));
    await new Promise((r) => setTimeout(r, 200));
    const steer = await handle(
      new Request('http://app/api/sessions/st/steer', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ inputId: 'steer1', message: 'change course' }),
      }),
    );
    expect(steer.status).toBe(202);
    const streamed = await reply;
    expect(streamed.parts.find((p) => p.type === 'steering-message')).toEqual({
      type: 'steering-message',
      id: 'steer1',
      parts: [{ type: 'text', text: 'change course' }],
    });
    expect(streamed.parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text)).toEqual(['changed course']);
    const history = plain(await (await handle(new Request('http://app/api/chat/st/messages'))).json()) as UIMessage[];
    expect(history.map((m) => m.id)).toEqual(['m1', 'm1-reply']);
    expect(history[1]).toEqual(plain(streamed));
    expect(history[1]!.parts.find((p) => p.type === 'data-actorloop-run')).toMatchObject({ data: { status: 'succeeded' } });
  });
});

describe('a provider error', () => {
  it("reaches the chat: the reply's stream sends an error chunk with its message, and the history's run part carries it", async () => {
    const runtime = createRuntime({
      store: memoryStore(),
      model: scriptedModel([{ error: { message: 'upstream 500 exploded', retryable: false } }]),
    });
    cleanups.push(() => runtime.close());
    const worker = runtime.serve({ concurrency: 2, leaseMs: 5000, pollMs: 20 });
    cleanups.push(() => worker.stop({ graceMs: 100 }));
    const handle = webHandler({ runtime, basePath: '/api' });
    const res = await handle(
      chatPost({ id: 'p', messages: [{ id: 'm1', role: 'user', parts: [{ type: 'text', text: 'go' }] }], trigger: 'submit-message' }),
    );
    const chunks = (await chunksOf(res)).map((c) => c.chunk);
    expect(chunks.slice(-3)).toEqual([
      { type: 'error', errorText: 'upstream 500 exploded' },
      { type: 'finish', finishReason: 'error' },
      '[DONE]',
    ]);
    const history = plain(await (await handle(new Request('http://app/api/chat/p/messages'))).json()) as UIMessage[];
    expect(history[1]!.parts.find((p) => p.type === 'data-actorloop-run')).toMatchObject({
      data: { status: 'failed', error: 'upstream 500 exploded' },
    });
  });
});

describe('uiMessageStream options', () => {
  it("the app's own bad options reject with a ValidationError; they are not a client's 400", async () => {
    const store = memoryStore();
    for (const bad of [{ bogus: 1 }, { heartbeatMs: 'x' }, { reply: 'all' }])
      await expect(uiMessageStream(store, 's', new Request('http://test/'), bad as never)).rejects.toSatisfy(isValidationError);
  });
});
