import type { ToolVerifier } from '../contracts/hooks.js';
import type { Pricing } from '../contracts/hooks.js';
import type { FinalVerifier } from '../contracts/hooks.js';
import type { DeliveryOwner } from '../contracts/hooks.js';
import { isObservable, type Observable } from 'rxjs';
import { z } from 'zod';
import { parseInput } from '../contracts/validate.js';
import { ValidationError } from '../contracts/errors.js';
import { askUserTool } from '../tools/ask-user.js';
import { LoopBudget, LoopConfig } from '../contracts/config.js';
import { InputHistory } from '../contracts/message.js';
import { ContentLimits, DEFAULT_CONTENT_LIMITS } from '../persistence/content-parts.js';
import { ContentSupport, type ModelProvider } from '../contracts/model.js';
import type { EventStore } from '../persistence/event-store.js';
import type { AnyTool } from '../tools/define-tool.js';
import type { InspectionEvent } from 'xstate';
import { ClockOption, type IdSource } from '../contracts/clock.js';
import { isZodSchema } from '../actors/final-output.js';
import { isAgent, type Agent } from '../tools/define-agent.js';
import { RateLimits } from '../contracts/rate-limits.js';
import type { SharedBuckets } from '../contracts/rate-limits.js';
import { TracingOptions } from './tracing-options.js';

const fn = <T>(what: string) => z.custom<T>((v) => typeof v === 'function', `${what} must be a function`);

const STORE_METHODS = [
  'attachWriter',
  'append',
  'readEvents',
  'loadSurface',
  'getHead',
  'getEventById',
  'listSessions',
  'events$',
  'close',
] as const;
const isStore = (v: unknown): v is EventStore =>
  typeof v === 'object' && v !== null && STORE_METHODS.every((m) => typeof (v as Record<string, unknown>)[m] === 'function');

/** What defineTool returns (a tool built by hand, or spread and changed, must keep this shape). */
const isTool = (v: unknown): v is AnyTool => {
  if (typeof v !== 'object' || v === null) return false;
  const t = v as Partial<AnyTool>;
  return (
    typeof t.name === 'string' &&
    typeof t.execute === 'function' &&
    (t.mode === 'parallel' || t.mode === 'exclusive') &&
    (Array.isArray(t.resources) || typeof t.resources === 'function') &&
    t.parameters instanceof z.ZodType &&
    typeof t.spec === 'object' &&
    t.spec !== null &&
    t.spec.name === t.name
  );
};

const isModel = (v: unknown): v is ModelProvider => {
  if (typeof v !== 'object' || v === null || typeof (v as ModelProvider).call !== 'function') return false;
  const name = (v as ModelProvider).providerName;
  const so = (v as ModelProvider).structuredOutput;
  const content = (v as ModelProvider).contentSupport;
  return (
    (name === undefined || (typeof name === 'string' && name.length > 0)) &&
    (so === undefined || so === 'native') &&
    (content === undefined || ContentSupport.safeParse(content).success)
  );
};

/** Unknown keys are refused: a misspelt option (aprovalFor) must not quietly become its default. */
export const RuntimeOptions = z.strictObject({
  store: z
    .custom<EventStore>(isStore, `an EventStore (an object with ${STORE_METHODS.join(', ')}), e.g. lmdbStore(...) or memoryStore()`)
    .optional(),
  /** Needed to run; a runtime that only submits and reads (its store given) goes without one. */
  model: z
    .custom<ModelProvider>(
      isModel,
      'a ModelProvider (e.g. openaiModel(...), scriptedModel(...)); its providerName, if any, a non-empty string; ' +
        "its structuredOutput, if any, 'native'; its contentSupport, if any, { image: [mediaType…], file: [mediaType…] }",
    )
    .optional(),
  tools: z
    .array(z.custom<AnyTool>(isTool, 'a tool made with defineTool'))
    .default([])
    .refine((ts) => new Set(ts.map((t) => t.name)).size === ts.length, 'tool names must be unique'),
  systemPrompt: z.string().optional(),
  /**
   * The agents sessions may run besides `default` (the runtime's own model, tools, systemPrompt;
   * docs/agents.md): names unique; agents reachable from these (handoffs, agentTools) are known too.
   */
  agents: z.array(z.custom<Agent>(isAgent, 'an agent made with defineAgent')).default([]),
  /** The default agent's output schema (docs/typed-output.md): every run's final answer is JSON of it, unless the run gives its own. */
  output: z.custom<z.ZodType>(isZodSchema, 'a zod schema (e.g. z.object({ … }))').optional(),
  /** Messages before every session's surface (after the system prompt): their tool calls and results pair up (InputHistory). */
  bootstrapMessages: InputHistory.default([]),
  /** Size limits of images' and files' bytes (docs/providers.md, "Content parts"): 20 MiB a blob, 50 MiB a message by default. */
  contentLimits: ContentLimits.default(DEFAULT_CONTENT_LIMITS),
  config: LoopConfig.default(LoopConfig.parse({})),
  budget: LoopBudget.default(LoopBudget.parse({})),
  pricing: fn<Pricing>('pricing').optional(),
  // kept by reference (not a parsed copy): a class instance's deliver keeps its `this`
  delivery: z
    .custom<DeliveryOwner>(
      (v) =>
        typeof v === 'object' &&
        v !== null &&
        typeof (v as DeliveryOwner).deliver === 'function' &&
        ((v as DeliveryOwner).idempotent === undefined || typeof (v as DeliveryOwner).idempotent === 'boolean'),
      'a delivery owner: { deliver(final): Promise<void>, idempotent?: boolean }',
    )
    .optional(),
  verifier: fn<ToolVerifier>('verifier').optional(),
  finalVerifier: fn<FinalVerifier>('finalVerifier').optional(),
  approvalFor: z.array(z.string()).default([]),
  askUser: z.boolean().default(false),
  /** An AbortSignal (set once aborted) or an RxJS Observable (set while its last value is truthy). */
  killSwitch: z
    .custom<AbortSignal | Observable<unknown>>((v) => v instanceof AbortSignal || isObservable(v), {
      error: (issue) => `an AbortSignal or an RxJS Observable, not ${issue.input === null ? 'null' : typeof issue.input}`,
    })
    .optional(),
  inspect: fn<(e: InspectionEvent) => void>('inspect').optional(),
  /**
   * OpenTelemetry spans (through `@opentelemetry/api`, an optional peer): by default the global
   * tracer when the API is installed (a no-op until a tracer provider is registered); `false` off;
   * `{ tracerProvider | tracer, recordContent }` to choose.
   */
  tracing: TracingOptions.optional(),
  /**
   * Model rate limits shared by every session of the runtime (docs/rate-limits.md): each
   * `{ provider?, model?, requestsPerMinute?, inputTokensPerMinute?, outputTokensPerMinute?, concurrent?, windowMs? }`.
   */
  rateLimits: RateLimits,
  /**
   * Where `rateLimits`' token buckets live when several processes share them (a `serve` pool):
   * `postgresRateBuckets({ pool })`. Without it the buckets are this process's own.
   */
  rateLimitBuckets: z
    .custom<SharedBuckets>(
      (v) =>
        typeof v === 'object' &&
        v !== null &&
        (['ensure', 'take', 'settle'] as const).every((m) => typeof (v as Record<string, unknown>)[m] === 'function'),
      'shared rate buckets: { ensure, take, settle } (e.g. postgresRateBuckets({ pool }))',
    )
    .optional(),
  /** Every timer, deadline, backoff and timeout of the runtime (XState's SimulatedClock fits). */
  clock: ClockOption,
  /** Session instance ids and the ids of events the runtime does not name itself. */
  ids: z
    .custom<IdSource>(
      (v) =>
        typeof v === 'object' &&
        v !== null &&
        typeof (v as IdSource).instanceId === 'function' &&
        typeof (v as IdSource).eventId === 'function',
      'an id source: { instanceId(), eventId() }',
    )
    .optional(),
});
export type RuntimeOptions = z.input<typeof RuntimeOptions>;
export type ResolvedRuntimeOptions = z.output<typeof RuntimeOptions>;

/**
 * `createRuntime`'s options, parsed and checked as a whole before anything is opened: a cost
 * budget without pricing, a tool named as the askUser built-in beside the askUser option are
 * refused (ValidationError), as every option its schema refuses.
 */
export function resolveRuntimeOptions(options: RuntimeOptions): ResolvedRuntimeOptions {
  const o = parseInput(RuntimeOptions, options, 'createRuntime');
  if (o.model === undefined && o.store === undefined)
    throw new ValidationError('createRuntime', [
      {
        path: ['model'],
        message:
          'a ModelProvider (e.g. openaiModel(...)) to run; a runtime that only submits and reads goes without one, ' +
          'its store given explicitly (createRuntime({ store }))',
      },
    ]);
  if (o.budget.maxCost !== undefined && !o.pricing) {
    throw new ValidationError('createRuntime', [
      {
        path: ['budget', 'maxCost'],
        message: 'a cost budget needs a pricing function to price model calls; without one it could never be reached',
      },
    ]);
  }
  if (o.askUser && o.tools.some((t) => t.name === askUserTool.name)) {
    throw new ValidationError('createRuntime', [
      {
        path: ['tools'],
        message:
          `a tool named ${askUserTool.name} beside the askUser option: ` + 'the built-in would replace it; rename it or leave askUser off',
      },
    ]);
  }
  return o;
}

/** Starting a run needs a model: a runtime made without one (it submits and reads) refuses it, naming `model`. */
export function assertModel(o: Pick<ResolvedRuntimeOptions, 'model'>, where: string): asserts o is { model: ModelProvider } {
  if (o.model === undefined)
    throw new ValidationError(where, [
      { path: ['model'], message: 'this runtime was created without a model: it submits and reads; give createRuntime a model to run' },
    ]);
}

/** The model of a runtime made without one: never called (starting a run is refused first, assertModel). */
export const noModel: ModelProvider = {
  modelId: 'none',
  call: () => Promise.reject(new ValidationError('model.call', [{ path: ['model'], message: 'this runtime was created without a model' }])),
};
