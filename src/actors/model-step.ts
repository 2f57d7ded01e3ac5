import { getEventListeners } from 'node:events';
import { isDecimal } from '../contracts/config.js';
import { STEP_SPENT, CancelledError, CapacityError, isCancelledError, isProviderError, ProviderError, ValidationError } from '../contracts/errors.js';
import { addUsage, type Message, type Usage } from '../contracts/message.js';
import { addDecimal } from './budget.js';
import { ModelResponseSchema, type ModelResponse } from '../contracts/model.js';
import { resourcesOf } from '../tools/define-tool.js';
import { validateToolCalls, type CallIssue } from '../tools/validate-calls.js';
import { ASK_USER_TOOL, askUserTool, matchesApprovalFor } from '../tools/ask-user.js';
import type { EventRecord, PendingRequest } from '../contracts/events.js';
import { onAbort } from './abort.js';
import { compact } from './compaction.js';
import { emitToolEnds, seqOf } from './commit-results.js';
import type { RunEnv } from './run-env.js';
import { redactSecrets } from '../providers/redact.js';

export interface StepAt {
  turn: number;
  step: number;
  attempt: number;
}

/** A call whose intent (`tool/call`) is committed: everything the batch needs, serializable. */
export interface CallDescr {
  callId: string;
  name: string;
  arguments: unknown;
  mode: 'parallel' | 'exclusive';
  resources: string[];
  idempotencyKey: string;
  /**
   * The model's argument text. `arguments` holds the schema's parsed output, but what the log
   * keeps of it is JSON: a call rebuilt from the log (approved, recovered) is parsed again from this.
   */
  rawArguments?: string;
}

export interface ModelStepInput {
  runId: string;
  /** Seq of this attempt's run/start: compaction keeps everything from here on. */
  runStartSeq: number;
  at: StepAt;
  corrections: number;
  /** What the run's maxOutputTokens budget leaves (undefined: no such budget): caps the call. */
  outputTokensLeft?: number;
}

export type ModelStepOutput = { usage?: Usage; cost?: string } & (
  | { kind: 'tools'; calls: CallDescr[] }
  | { kind: 'final'; content: string }
  | { kind: 'rejected' }
  | { kind: 'blocked'; locks: string[] }
  | { kind: 'suspend'; pendingRequest: PendingRequest }
  /** A stop accepted before this step's model call started (e.g. while it compacted): none starts. */
  | { kind: 'stopped' }
);

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(new CancelledError());
    const onAbort = () => (clearTimeout(t), reject(new CancelledError()));
    const t = setTimeout(() => (signal.removeEventListener('abort', onAbort), resolve()), ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });

/**
 * The app's `pricing` for one model call, checked here (an effect): a price that is not a decimal
 * string fails the run with a ValidationError naming it, and the run still ends with `run/end`.
 */
function priceOf(env: RunEnv, usage: Usage): string {
  const cost: unknown = env.pricing!(usage, env.model.modelId);
  if (!isDecimal(cost)) {
    throw new ValidationError('pricing', [{ path: [], message: `pricing returned ${JSON.stringify(cost) ?? String(cost)}, not a non-negative decimal string such as "0.25"` }]);
  }
  return cost;
}

/** One model request as callWithRetries sends it. */
export interface CallSpec {
  messages: readonly Message[];
  tools: RunEnv['toolSpecs'];
  digest: string;
  maxOutputTokens?: number;
  /** Stream the answer's deltas to subscribers (the step's own call; not a compaction's summary). */
  live: boolean;
}

/**
 * Calls the model with the runtime's retries (DESIGN §4 item 2): each failed attempt is staged as
 * `assistant/attempt`, and every response is checked (a bad one is a non-retryable ProviderError).
 * The step's call and a compaction's summary call both go through here.
 */
export async function callWithRetries(env: RunEnv, at: StepAt, signal: AbortSignal, spec: CallSpec): Promise<{ res: ModelResponse; latencyMs: number; digest: string }> {
  const { messages, digest, live } = spec;
  for (let n = 1; ; n++) {
    const t0 = performance.now();
    let started = false;
    let streamed = '';
    // what this attempt streamed is never committed: close it as discarded so clients drop it
    const discard = (reason: string) => {
      if (started) env.emit({ type: 'message_end', role: 'assistant', message: { role: 'assistant', content: streamed }, discarded: { reason } });
    };
    // a retry gets a signal of its own (following the step's): an SDK that leaves its abort
    // listener on the request's signal must not pile one up per attempt
    let attempt: AbortController | undefined;
    let offAttempt = () => {};
    if (n > 1) {
      const own = new AbortController();
      attempt = own;
      offAttempt = onAbort(signal, (reason) => own.abort(reason));
    }
    const callSignal = attempt?.signal ?? signal;
    try {
      const request = spec.maxOutputTokens === undefined ? { messages, tools: spec.tools, signal: callSignal } : { messages, tools: spec.tools, signal: callSignal, maxOutputTokens: spec.maxOutputTokens };
      const res = await env.model.call(request, (e) => {
        if (e.type !== 'text_delta' || !live) return;
        if (!started) env.emit({ type: 'message_start', role: 'assistant' });
        started = true;
        streamed += e.text;
        env.emit({ type: 'message_delta', role: 'assistant', text: e.text });
      });
      const checked = ModelResponseSchema.safeParse(res);
      if (!checked.success) {
        const issue = checked.error.issues[0];
        throw new ProviderError(`the model provider returned an invalid response: ${issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'invalid'}`, { retryable: false, code: 'invalid_response' });
      }
      offAttempt();
      return { res, latencyMs: performance.now() - t0, digest };
    } catch (e) {
      offAttempt();
      if (signal.aborted || isCancelledError(e)) {
        discard('model call cancelled');
        throw new CancelledError('model call cancelled');
      }
      const pe = isProviderError(e) ? e : new ProviderError(`model call failed: ${redactSecrets((e as Error)?.message ?? String(e))}`, { retryable: false, code: 'unknown', cause: e });
      env.writer.stage('assistant/attempt', at, {
        attemptNumber: n,
        requestDigest: digest,
        latencyMs: performance.now() - t0,
        error: { name: pe.name, message: redactSecrets(pe.message), code: pe.providerCode, retryable: pe.retryable, partialOutput: pe.partialOutput },
      });
      discard(`model attempt ${n} failed: ${pe.message}${pe.retryable && n < env.config.maxProviderAttempts ? ' (retrying)' : ''}`);
      if (!pe.retryable || n >= env.config.maxProviderAttempts) throw pe;
      await sleep(Math.min(env.config.maxRetryDelayMs, pe.retryAfterMs ?? env.config.retryBackoffMs * 2 ** (n - 1)), signal);
    }
  }
}

/** Each run's step controller, keyed by the run's effects signal (one per run actor). */
const stepControllers = new WeakMap<AbortSignal, AbortController>();

/**
 * The signal of one model step, aborted (with the source's reason) if the run stops or is
 * cancelled while the step runs; `dispose` unhooks it when the step ends. A step gets a new
 * controller when the provider left a listener on the last one (SDKs leave one per request: on a
 * run-wide signal they would pile up), else it reuses it — an AbortController costs ≈ 2.5 µs on
 * Node 20. The hooks on the sources are shared (`onAbort`): cheaper than `AbortSignal.any`,
 * whose weak-ref bookkeeping costs several µs a step.
 */
function stepSignal(run: AbortSignal, cancel: AbortSignal): { signal: AbortSignal; dispose: () => void } {
  let ac = stepControllers.get(run);
  if (!ac || ac.signal.aborted || getEventListeners(ac.signal, 'abort').length > 0) {
    ac = new AbortController();
    stepControllers.set(run, ac);
  }
  if (run.aborted || cancel.aborted) {
    ac.abort(run.aborted ? run.reason : cancel.reason);
    return { signal: ac.signal, dispose: () => {} };
  }
  const controller = ac;
  const abort = (reason: unknown) => controller.abort(reason);
  const offRun = onAbort(run, abort);
  const offCancel = onAbort(cancel, abort);
  return {
    signal: controller.signal,
    dispose: () => {
      offRun();
      offCancel();
    },
  };
}

/**
 * One model step up to the tool batch: context (compacting when needed), the model call with
 * retries, validation, and the step's first commit point (assistant message + tool-call intents).
 */
export const modelStepOp =
  (env: RunEnv) =>
  (input: ModelStepInput, runSignal: AbortSignal): Promise<ModelStepOutput> => {
    const step = stepSignal(runSignal, env.cancelSignal);
    const done = modelStep(env, input, step.signal);
    done.then(step.dispose, step.dispose);
    return done;
  };

async function modelStep(env: RunEnv, input: ModelStepInput, signal: AbortSignal): Promise<ModelStepOutput> {
  const { at } = input;
  const steers = env.takeSteers();
  if (steers.length > 0) await commitSteers(env, at, steers);
  const limit = env.config.contextWindow - env.config.outputReserve;
  if (env.prefixTokens + env.surface.tokens <= limit) return stepAfterContext(env, input, signal, undefined);
  const compacted = await compact(env, at, input.runStartSeq, signal);
  try {
    const size = env.prefixTokens + env.surface.tokens;
    if (size > limit) throw new CapacityError(size, limit);
    // steers accepted while the summary call ran go before this step's model call too
    const late = env.takeSteers();
    if (late.length > 0) await commitSteers(env, at, late);
    return await stepAfterContext(env, input, signal, compacted);
  } catch (e) {
    // the summary call's usage is in the log (the compaction event): the run's result counts it too
    if (compacted.usage && e !== null && typeof e === 'object' && !(STEP_SPENT in e)) {
      let cost: string | undefined;
      try {
        cost = env.pricing ? priceOf(env, compacted.usage) : undefined;
      } catch {
        cost = undefined;
      }
      Object.defineProperty(e, STEP_SPENT, { value: { usage: compacted.usage, ...(cost !== undefined ? { cost } : {}) } satisfies { usage: Usage; cost?: string } });
    }
    throw e;
  }
}

/** The step once its context fits: the stop check, the model call, validation and the first commit point. */
async function stepAfterContext(env: RunEnv, input: ModelStepInput, signal: AbortSignal, compacted: { usage?: Usage } | undefined): Promise<ModelStepOutput> {
  const { at } = input;
  // DESIGN §4 item 10: a stop accepted before this step's model call starts no new model call
  if (env.stopAcceptedFor === input.runId) {
    return { kind: 'stopped', ...(compacted?.usage ? { usage: compacted.usage, ...(env.pricing ? { cost: priceOf(env, compacted.usage) } : {}) } : {}) };
  }
  env.writer.stage('step/start', at, {});
  env.emit({ type: 'step_start', step: at.step });
  await env.backpressure();

  // one exact-size copy (concat), not a spread's growing array: O(history) per step, but a memcpy
  const { res, latencyMs, digest } = await callWithRetries(env, at, signal, {
    messages: env.prefix.concat(env.surface.messages),
    tools: env.toolSpecs,
    digest: env.surface.requestDigest(env.prefixDigest, env.toolCatalogDigest),
    live: true,
    ...(input.outputTokensLeft !== undefined ? { maxOutputTokens: input.outputTokensLeft } : {}),
  });
  const message: Message = { ...res.message, role: 'assistant' };
  // the step's usage and cost include its compaction's summary call (DESIGN §4 item 8)
  const usage = compacted?.usage ? addUsage(compacted.usage, res.usage) : res.usage;
  // the app's pricing may throw: before the message is staged, so a failed step leaves no
  // assistant tool calls without results on the surface
  const priced = env.pricing && usage ? { cost: compacted?.usage ? addDecimal(priceOf(env, compacted.usage), res.usage ? priceOf(env, res.usage) : '0') : priceOf(env, usage) } : {};
  env.writer.stage('assistant/message', at, {
    message,
    ...(res.usage ? { usage: res.usage } : {}),
    finishReason: res.finishReason,
    latencyMs,
    requestDigest: digest,
  });
  // message_end goes out when the message is committed (ExecutionSession.onCommitted), with its logSeq
  const calls = message.toolCalls ?? [];
  if (calls.length === 0) {
    // A refusal is the model's answer: its text is the final answer when there is no other text.
    // An answer the provider's content filter removed entirely is no answer: the run fails, named.
    const content = message.content || res.refusal || '';
    if (!content && res.finishReason === 'content_filter') {
      throw new ProviderError("the provider's content filter removed the model's answer", { retryable: false, code: 'content_filter' });
    }
    return { kind: 'final', content, usage, ...priced };
  }

  try {
    return await afterToolCalls(env, input, message, res, usage, priced);
  } catch (e) {
    // An app function (a tool's resources or needsApproval) threw before the step committed:
    // the model's tool calls must not stay on the surface unanswered (providers refuse that).
    if (env.writer.hasStaged) {
      const why = `not run: the step failed (${(e as Error)?.message ?? String(e)})`;
      for (const c of calls) env.writer.stage('tool/result', at, { callId: c.id, name: c.name, outcome: { kind: 'skipped', reason: why } });
      env.writer.stage('step/end', at, usage ? { usage } : {});
    }
    throw e;
  }
}

async function afterToolCalls(
  env: RunEnv,
  input: ModelStepInput,
  message: Message,
  res: ModelResponse,
  usage: Usage | undefined,
  priced: { cost?: string },
): Promise<ModelStepOutput> {
  const { at, runId } = input;
  const calls = message.toolCalls!;
  const { calls: valid, issues } = validateToolCalls(calls, env.tools, res.finishReason);
  if (issues.length > 0) {
    env.writer.stage('tool/batch-rejected', at, { issues });
    env.writer.stage('step/end', at, usage ? { usage } : {});
    emitStepEnd(env, at, usage, await env.writer.commit());
    return { kind: 'rejected', usage, ...priced };
  }
  const descrs: CallDescr[] = valid.map((c) => ({
    callId: c.callId,
    name: c.name,
    arguments: c.arguments,
    mode: c.tool.mode,
    resources: resourcesOf(c.tool, c.arguments),
    // the step too: a provider may number call ids per message (call_0 in every step)
    idempotencyKey: `${env.sessionId}/${runId}/${at.step}/${c.callId}`,
    rawArguments: calls.find((m) => m.id === c.callId)?.arguments ?? '',
  }));
  const held = env.heldLocks.size === 0 ? [] : [...new Set(descrs.flatMap((d) => d.resources.filter((r) => env.heldLocks.has(r))))];
  if (held.length > 0) {
    for (const d of descrs) {
      env.writer.stage('tool/result', at, {
        callId: d.callId,
        name: d.name,
        outcome: { kind: 'skipped', reason: `blocked: resources ${held.join(', ')} are locked by an uncertain earlier call` },
      });
    }
    env.writer.stage('step/end', at, usage ? { usage } : {});
    emitStepEnd(env, at, usage, await env.writer.commit());
    return { kind: 'blocked', locks: held, usage, ...priced };
  }
  // the built-in askUser (enabled by the option), not an app tool that happens to share the name
  const asks = descrs.filter((d) => d.name === ASK_USER_TOOL && env.tools.get(d.name) === askUserTool);
  if (asks.length > 0 && descrs.length > 1) {
    const issues: CallIssue[] = descrs.map((d) => ({
      callId: d.callId,
      name: d.name,
      message: `${ASK_USER_TOOL} must be the only tool call of its message; ask first, then call the other tools`,
    }));
    env.writer.stage('tool/batch-rejected', at, { issues });
    env.writer.stage('step/end', at, usage ? { usage } : {});
    emitStepEnd(env, at, usage, await env.writer.commit());
    return { kind: 'rejected', usage, ...priced };
  }
  const ask = asks[0];
  const needing = ask ? [] : valid.filter((c) => needsApproval(env, c.tool, c.name, c.arguments));
  if (ask || needing.length > 0) {
    // cancelled meanwhile: no suspension (the catch in modelStep answers the calls `skipped`)
    if (env.cancelSignal.aborted) throw new CancelledError('cancelled before the run suspended for an answer');
    const pendingRequest: PendingRequest = ask
      ? {
          kind: 'question',
          questionId: `question-${ask.callId}`,
          callId: ask.callId,
          question: (ask.arguments as { question: string }).question,
          ...((ask.arguments as { schema?: Record<string, unknown> }).schema ? { schema: (ask.arguments as { schema: Record<string, unknown> }).schema } : {}),
        }
      : {
          kind: 'approval',
          questionId: `approval-${needing[0]!.callId}`,
          calls: needing.map((c) => ({ callId: c.callId, name: c.name, arguments: c.arguments })),
          expiresAt: Date.now() + env.config.approvalTimeoutMs,
        };
    env.writer.stage(ask ? 'question/asked' : 'approval/requested', at, { pendingRequest, batch: descrs });
    env.writer.stage('run/suspended', at, { pendingRequest });
    const records = await env.writer.commit();
    env.emit(ask ? { type: 'question_asked', pendingRequest } : { type: 'approval_requested', pendingRequest }, seqOf(records, ask ? 'question/asked' : 'approval/requested'));
    return { kind: 'suspend', pendingRequest, usage, ...priced };
  }
  for (const d of descrs) env.writer.stage('tool/call', at, { ...d });
  await env.writer.commit();
  return { kind: 'tools', calls: descrs, usage, ...priced };
}

/** A step that ends at its own commit (rejected or blocked): the envelopes of what it committed. */
function emitStepEnd(env: RunEnv, at: StepAt, usage: Usage | undefined, records: readonly EventRecord[]): void {
  emitToolEnds(env, records);
  env.emit({ type: 'step_end', step: at.step, ...(usage ? { usage } : {}) }, seqOf(records, 'step/end'));
}

function needsApproval(env: RunEnv, tool: { needsApproval?: boolean | ((a: never) => boolean) }, name: string, args: unknown): boolean {
  const own = typeof tool.needsApproval === 'function' ? tool.needsApproval(args as never) : tool.needsApproval === true;
  return own || matchesApprovalFor(env.approvalFor, name);
}

/** Steer inputs become user messages after the batch that settled and before this model call. */
async function commitSteers(env: RunEnv, at: StepAt, steers: ReturnType<RunEnv['takeSteers']>): Promise<void> {
  for (const s of steers) for (const message of s.messages) env.writer.stage('user/message', at, { message, inputId: s.inputId });
  const records = await env.writer.commit();
  for (const s of steers) {
    const seq = records.find((r) => r.type === 'user/message' && r.payload.inputId === s.inputId)?.seq;
    env.emit({ type: 'input_committed', inputId: s.inputId, durability: 'durable' }, seq);
  }
}
