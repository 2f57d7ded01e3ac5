import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  anthropicModel,
  createRuntime,
  defineTool,
  isValidationError,
  lmdbStore,
  mcpTools,
  memoryStore,
  migratePostgres,
  nodeListener,
  openaiModel,
  postgresStore,
  renderTimeline,
  repairStore,
  scriptedModel,
  sessionEvents,
  SubscriberHub,
  verifyStore,
  webHandler,
  type ExecutionSession,
  type Runtime,
} from '../../src/index.js';
import { sessionStream } from '../../src/web/client.js';
import { tempDir } from '../helpers/tmp.js';

/**
 * Every option object of the public API refuses a key it does not know (src/contracts/config.ts):
 * a misspelt option must be a ValidationError naming it, never quietly its default. Each case
 * below passes one public entry point its option object with one misspelt key (`aprovalFor`
 * style: a real option's name with a typo), top-level or nested.
 */
const dir = tempDir('actorloop-strict-');
const model = () => scriptedModel(['ok'], { loop: true });
const tool = { name: 't', description: 'a tool', parameters: z.object({ a: z.string() }), mode: 'parallel' as const, execute: () => 'ok' };
const fakeOpenAI = { chat: { completions: { create: async () => ({}) } } };
const fakeAnthropic = { messages: { create: async () => ({}), stream: () => ({}) } };
const fakeMcp = { listTools: async () => ({ tools: [] }), callTool: async () => ({ content: [] }), close: async () => {} };

let runtime: Runtime;
let session: ExecutionSession;
const rt = () => (runtime ??= createRuntime({ store: memoryStore(), model: model() }));
const open = async () => (session ??= await rt().openSession('strict'));
afterAll(async () => {
  await runtime?.close();
  await dir.cleanup();
});

/** [the option object, its misspelt key, the call]. */
const CASES: [string, string, () => unknown][] = [
  ['createRuntime', 'aprovalFor', () => createRuntime({ model: model(), aprovalFor: ['x'] } as never)],
  ['createRuntime: config', 'maxParalelTools', () => createRuntime({ model: model(), config: { maxParalelTools: 2 } } as never)],
  ['createRuntime: budget', 'maxStep', () => createRuntime({ model: model(), budget: { maxStep: 2 } } as never)],
  ['createRuntime: tracing', 'recordContents', () => createRuntime({ model: model(), tracing: { recordContents: true } } as never)],
  [
    'createRuntime: bootstrapMessages[0]',
    'toolCallID',
    () => createRuntime({ model: model(), bootstrapMessages: [{ role: 'user', content: 'hi', toolCallID: 'x' }] } as never),
  ],
  ['runtime.serve', 'concurency', () => rt().serve({ concurency: 2 } as never)],
  ['runtime.submit: entry', 'reasn', () => rt().submit('strict-s', { kind: 'cancel', entryId: 'e1', reasn: 'x' } as never)],
  ['runtime.waitForResult', 'pollMS', () => rt().waitForResult('strict-s', 'r1', { pollMS: 10 } as never)],
  [
    'session.execute: prompt',
    'attemptID',
    async () => (await open()).execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', attemptID: 'a1', message: 'hi' } as never),
  ],
  [
    'session.execute: respond',
    'questionID',
    async () => (await open()).execute({ kind: 'respond', questionId: 'q', questionID: 'q', answer: 1 } as never),
  ],
  ['session.execute: continue', 'runID', async () => (await open()).execute({ kind: 'continue', runID: 'r1' } as never)],
  [
    'session.run: prompt message',
    'contents',
    async () => (await open()).run({ role: 'user', content: 'hi', contents: 'hi' } as never).result,
  ],
  [
    'session.submitInput',
    'mdoe',
    async () => (await open()).submitInput({ inputId: 'i1', message: 'hi', mode: 'steer', mdoe: 'steer' } as never),
  ],
  [
    'session.stopAfterCurrentToolRound',
    'idempotencyKye',
    async () =>
      (await open()).stopAfterCurrentToolRound({
        sessionId: 'strict',
        sessionInstanceId: 'x',
        interactionId: 'x',
        expectedRunEpoch: 1,
        idempotencyKey: 'k',
        idempotencyKye: 'k',
      } as never),
  ],
  ['session.subscribe', 'requird', async () => (await open()).subscribe(() => {}, { requird: true } as never)],
  ['session.loadCheckpoint', 'stateContxt', async () => (await open()).loadCheckpoint({ messages: [], stateContxt: 1 } as never)],
  ['new SubscriberHub', 'maxErorrs', () => new SubscriberHub({ maxErorrs: 3 } as never)],
  [
    'memoryStore: readEvents range',
    'fromSq',
    async () => {
      for await (const _ of memoryStore().readEvents('s', { fromSq: 2 } as never));
    },
  ],
  ['memoryStore', 'path', () => memoryStore({ path: '/tmp/x' } as never)],
  ['memoryStore: events$', 'fromSq', () => memoryStore().events$('s', { fromSq: 2 } as never)],
  ['lmdbStore', 'durabilty', () => lmdbStore({ path: dir.path, durabilty: 'committed' } as never)],
  ['postgresStore', 'maxConections', () => postgresStore({ connectionString: 'postgres://127.0.0.1/x', maxConections: 3 } as never)],
  ['migratePostgres', 'shema', () => migratePostgres({ connectionString: 'postgres://127.0.0.1/x', shema: 'a' } as never)],
  ['verifyStore', 'timeoutMS', () => verifyStore(dir.path, { timeoutMS: 10 } as never)],
  ['repairStore', 'timeoutMS', () => repairStore(dir.path, { timeoutMS: 10 } as never)],
  ['openaiModel', 'maxToken', () => openaiModel({ client: fakeOpenAI, model: 'm', maxToken: 5 } as never)],
  ['anthropicModel', 'maxToken', () => anthropicModel({ client: fakeAnthropic, model: 'm', maxToken: 5 } as never)],
  ['scriptedModel', 'loops', () => scriptedModel(['x'], { loops: true } as never)],
  ['defineTool', 'reconcil', () => defineTool({ ...tool, reconcil: () => undefined } as never)],
  ['mcpTools', 'needApproval', () => mcpTools(fakeMcp as never, { needApproval: ['x'] } as never)],
  ['webHandler', 'authorise', () => webHandler({ runtime: rt(), authorise: () => false } as never)],
  ['webHandler: stream', 'heartbeatMS', () => webHandler({ runtime: rt(), stream: { heartbeatMS: 100 } } as never)],
  [
    'sessionEvents',
    'polMs',
    async () => {
      const res = sessionEvents(memoryStore(), 's', new Request('http://x/'), { polMs: 10 } as never);
      if (res.status === 400) throw new Error(await res.text());
      await res.body?.cancel();
    },
  ],
  ['nodeListener', 'orign', () => nodeListener(async () => new Response(), { orign: 'http://x' } as never)],
  ['renderTimeline', 'sesionId', () => renderTimeline([], { sessionId: 's', sesionId: 's' } as never)],
  ['actorloop/client sessionStream', 'lastLogSeqq', () => sessionStream({ url: 'http://127.0.0.1:1/x', lastLogSeqq: 3 } as never).next()],
];

describe('every public option object refuses an unknown key', () => {
  it.each(CASES)('%s refuses %s', async (_where, key, call) => {
    let error: unknown;
    try {
      await call();
    } catch (e) {
      error = e;
    }
    if (!isValidationError(error)) {
      // sessionEvents answers bad options with a 400 whose body is the ValidationError
      const body = error instanceof Error ? error.message : '';
      expect(body.startsWith('{') && (JSON.parse(body) as { error: string }).error, `${key}: ${String(error)}`).toBe('ValidationError');
      expect(body).toContain(key);
      return;
    }
    expect(error.message).toContain(key);
  });
});
