import { fromCallback, type ActorSystem, type AnyActorRef } from 'xstate';
import { CallAbort } from '../contracts/abort.js';
import type { ToolCallIntent, ToolCallOutput } from '../contracts/calls.js';
import { CancelledError, isCancelledError } from '../contracts/errors.js';
import { assertJson, jsonIssue, type JsonValue } from '../contracts/json.js';
import { ToolOutcomeReturn, type ReturnedOutcome, type ToolOutcome } from '../contracts/tools.js';
import { partNotTaken, storeContent } from '../persistence/content-parts.js';
import type { AnyTool, ToolContext } from '../tools/define-tool.js';
import type { BudgetLeft } from '../contracts/reservation.js';
import { CHILD_BUDGET } from './budget-pool.js';
import { CALL_RUNTIME, type CallControl } from '../tools/call-runtime.js';
import { CallRequests, RunningCall } from './running-call.js';
import { servicesIn, type ServicesSource, type SessionServices } from './session-services.js';

export interface ToolCallInput {
  call: ToolCallIntent;
  /** The call's tool, of the tools its attempt was offered. */
  tool: AnyTool;
  runId: string;
  /** The call's place in its batch: how the batch knows its reply (call ids come from the model). */
  index: number;
  /** The run's control requests made before the call started (stop after the round, detach). */
  control?: CallControl[];
  /** Its batch's budget: an agentTool's child spends from it (budget-pool.ts). */
  budget?: BatchBudget;
}

/** A tool batch's place (`<runId>/<runEpoch>/<step>`) and what its run's usage budgets left when it started (absent: none). */
export interface BatchBudget {
  batch: string;
  left?: BudgetLeft;
}

/** What a tool-call actor reports to its batch. */
export type ToolCallReply =
  | { type: 'call.done'; index: number; output: ToolCallOutput }
  | { type: 'call.failed'; index: number; callId: string; error: unknown };

/**
 * What a batch sends a running tool-call actor: the run was cancelled (its tool's signal aborts),
 * or asked to stop after the round or to detach (what a call of the runtime's own tools follows:
 * an agent call's child session).
 */
export type ToolCallControl = { type: 'CANCEL'; reason: string } | { type: 'CONTROL'; request: CallControl };

const OUTCOME_KINDS = new Set(['completed', 'skipped', 'cancelled', 'uncertain-settled', 'uncertain-hanging']);

const errorResult = (content: string): ToolOutcome => ({
  kind: 'completed',
  content,
  isError: true,
  concludesTurn: false,
  releaseResources: [],
});

/**
 * What a tool returned, as an outcome (DESIGN §4 item 5): a string is the model's text; an object
 * whose `kind` is an outcome kind is that outcome; any other JSON value (number, boolean, null,
 * array, plain object) is serialised for the model and kept as `structured`. Anything else (no
 * value, a BigInt, a function, a cycle, a Date…) is an error result naming the tool.
 */
export function normalizeOutcome(v: unknown, toolName: string): ToolOutcome {
  if (typeof v === 'string') return { kind: 'completed', content: v, isError: false, concludesTurn: false, releaseResources: [] };
  if (
    typeof v === 'object' &&
    v !== null &&
    !Array.isArray(v) &&
    Object.hasOwn(v, 'kind') &&
    OUTCOME_KINDS.has((v as { kind: unknown }).kind as string)
  )
    return parsedOutcome(v, toolName);
  if (v === undefined)
    return errorResult(`tool ${toolName} returned no value (undefined): a tool returns a string, a JSON value or a tool outcome`);
  const issue = jsonIssue(v);
  if (issue)
    return errorResult(
      `tool ${toolName} returned a value that is not JSON${issue.path.length > 0 ? ` (at ${issue.path.join('.')})` : ''}: ${issue.message}`,
    );
  return {
    kind: 'completed',
    content: JSON.stringify(v),
    structured: v as JsonValue,
    isError: false,
    concludesTurn: false,
    releaseResources: [],
  };
}

function parsedOutcome(v: object, toolName: string): ToolOutcome {
  const parsed = ToolOutcomeReturn.safeParse(v);
  if (!parsed.success)
    return errorResult(`tool ${toolName} returned an invalid outcome: ${parsed.error.issues[0]?.message ?? 'unknown shape'}`);
  // free-form fields (`structured`, a message's providerData): an outcome the log cannot record
  // (a BigInt, a cycle) would fail the step's commit and leave the call unanswered — it becomes
  // an error result instead
  // additional messages are logged as user/message: a user's message, never a tool call or result
  // that would sit unanswered (or unasked) on the surface
  if (
    parsed.data.kind === 'completed' &&
    parsed.data.additionalMessages?.some((m) => m.role !== 'user' || m.toolCalls !== undefined || m.toolCallId !== undefined)
  ) {
    return errorResult(
      `tool ${toolName} returned additionalMessages that are not plain user messages (role user, no tool calls or tool results)`,
    );
  }
  if (parsed.data.kind === 'completed' && (parsed.data.structured !== undefined || parsed.data.additionalMessages !== undefined)) {
    try {
      JSON.stringify(parsed.data);
    } catch (e) {
      return errorResult(`tool ${toolName} returned an outcome that is not JSON: ${messageOf(e)}`);
    }
  }
  // its bytes, if any, are stored as blobs by toolCallActor before the output leaves it (storedOutput)
  return parsed.data as ToolOutcome;
}

/**
 * DESIGN §2: an outcome's `resourceLocks` are always the call's declared resources, whatever the
 * tool put there — an uncertain-hanging (or unsettled cancelled) call keeps exactly those locked.
 */
export function withCallLocks(o: ToolOutcome, call: { resources: string[] }): ToolOutcome {
  return o.kind === 'cancelled' || o.kind === 'uncertain-hanging' ? { ...o, resourceLocks: call.resources } : o;
}

/** The output of a call that did not run (its reason is what the model reads). */
export function skippedOutput(call: { callId: string; name: string }, reason: string): ToolCallOutput {
  // a call that never ran has no run times (its tool/result records none)
  return { callId: call.callId, name: call.name, outcome: { kind: 'skipped', reason }, startedAt: 0, endedAt: 0 };
}

/** A thrown value's message, whatever was thrown (String() itself throws on some objects). */
export function messageOf(e: unknown): string {
  try {
    return e instanceof Error ? e.message : String(e);
  } catch {
    return Object.prototype.toString.call(e);
  }
}

const errorOutcome = (e: unknown): ToolOutcome => ({
  kind: 'completed',
  content: messageOf(e),
  isError: true,
  concludesTurn: false,
  releaseResources: [],
});

/**
 * Runs one tool call (its `tool/call` intent is already durable) and reports `call.done` to its
 * batch. The tool's signal aborts on timeout, cancellation and when the actor stops; a tool that
 * does not settle within `cancelGraceMs` after the abort is recorded `uncertain-hanging`, its
 * resources staying locked. A callback actor: no promise-actor machinery per call.
 */
export const toolCallActor = (env: ServicesSource) =>
  callActor((input, ac, system, requests, self) => {
    const services = servicesIn(env, system);
    return runToolCall(services, input, ac, requests, self).then((out) => (hasMedia(out.outcome) ? storedOutput(services, out) : out));
  });

/** `o`, unless it carries bytes: then an error result (reconcile's outcomes are text). */
export const textOnly = (o: ToolOutcome, toolName: string): ToolOutcome =>
  hasBytes(o) ? errorResult(`tool ${toolName}'s reconcile returned images or files as bytes: reconcile returns text`) : o;

/** Whether a completed outcome's content carries bytes (parts to store as blobs). */
const hasBytes = (o: ToolOutcome | ReturnedOutcome): boolean =>
  o.kind === 'completed' && typeof o.content !== 'string' && o.content.some((p) => 'data' in p);

/** Whether a completed outcome's content carries an image's or a file's bytes or a reference to them. */
const hasMedia = (o: ToolOutcome | ReturnedOutcome): boolean =>
  o.kind === 'completed' && typeof o.content !== 'string' && o.content.some((p) => 'mediaType' in p);

/**
 * A tool's output with its content's bytes stored as blobs (content-parts.ts). A part the model
 * cannot take (a media type outside its `contentSupport`), and bytes that cannot be stored (over a
 * limit, a store without blobs), make an error result the model reads.
 */
async function storedOutput(env: SessionServices, out: ToolCallOutput): Promise<ToolCallOutput> {
  const o = out.outcome as ReturnedOutcome & { kind: 'completed' };
  const untaken = typeof o.content === 'string' ? [] : o.content.flatMap((p) => partNotTaken(p, env.model) ?? []);
  if (untaken.length > 0)
    return { ...out, outcome: errorResult(`tool ${out.name} returned content the model cannot take: ${untaken.join('; ')}`) };
  try {
    const content = await storeContent(o.content, env.blobs, env.contentLimits, `tool ${out.name}`);
    return { ...out, outcome: { ...o, content } };
  } catch (e) {
    return { ...out, outcome: errorResult(`tool ${out.name} returned content that cannot be stored: ${messageOf(e)}`) };
  }
}

/**
 * A tool-call actor from an async function: reports `call.done` (or `call.failed` if the function
 * itself throws) to the batch; a `CANCEL` from the batch, or stopping the actor before that,
 * aborts the `CallAbort` it was given (an AbortController whose signal is made only if read).
 */
export const callActor = (
  run: (
    input: ToolCallInput,
    ac: CallAbort,
    system: ActorSystem<any>,
    requests: CallRequests,
    self: AnyActorRef,
  ) => Promise<ToolCallOutput>,
) =>
  fromCallback<ToolCallControl, ToolCallInput>(({ input, sendBack, receive, system, self }) => {
    const ac = new CallAbort();
    const requests = new CallRequests(input.control);
    let settled = false;
    receive((e) => {
      if (settled) return;
      if (e.type === 'CANCEL') ac.abort(new CancelledError(e.reason));
      else requests.request(e.request);
    });
    run(input, ac, system, requests, self).then(
      (output) => {
        settled = true;
        sendBack({ type: 'call.done', index: input.index, output } satisfies ToolCallReply);
      },
      (error: unknown) => {
        settled = true;
        sendBack({ type: 'call.failed', index: input.index, callId: input.call.callId, error } satisfies ToolCallReply);
      },
    );
    return () => {
      if (!settled) ac.abort(new DOMException('the tool batch stopped', 'AbortError'));
    };
  });

const CALL_ABORT = Symbol('callAbort');
const CALL_ACTOR = Symbol('callActor');

/**
 * The tool-call actor running the call `ctx` was given to (absent outside a tool-call actor): an
 * agentTool's child session is reported to the inspector under it (docs/agents.md).
 */
export const callActorOf = (ctx: ToolContext): AnyActorRef | undefined => (ctx as { [CALL_ACTOR]?: AnyActorRef })[CALL_ACTOR];
const SIGNAL_GETTER: PropertyDescriptor = {
  get(this: { [CALL_ABORT]: CallAbort }) {
    return this[CALL_ABORT].signal;
  },
  enumerable: true,
  configurable: true,
};

async function runToolCall(
  env: SessionServices,
  input: ToolCallInput,
  ac: CallAbort,
  requests: CallRequests,
  self: AnyActorRef,
): Promise<ToolCallOutput> {
  const { call, runId, tool } = input;
  // every call, parallel ones too: a fenced writer starts no tool (the calls of one wave share
  // one read of the head, LogWriter.checkFenced)
  let fenced: boolean;
  try {
    // (no await at all where the store reads its head synchronously: memory, LMDB)
    fenced = env.writer.fencedNow() ?? (await env.writer.checkFenced());
  } catch (e) {
    // the writer check could not read the store: the call is not started
    return skippedOutput(call, `not run: whether another writer took over the session could not be checked (${messageOf(e)})`);
  }
  if (fenced) return skippedOutput(call, 'not run: another writer took over the session (fenced)');
  if (ac.aborted) {
    // cancelled or stopped while the fence was checked: the tool never starts (an agent call
    // cancelled is left for the run's end to answer, once the cancel has reached its child)
    if (call.resumable && isCancelledError(ac.reason))
      return { ...skippedOutput(call, 'not run: the run was cancelled before the call started'), unsettled: {} };
    return skippedOutput(
      call,
      isCancelledError(ac.reason)
        ? 'not run: the run was cancelled before the call started'
        : 'not run: the run stopped before the call started',
    );
  }
  // the last check before the tool starts, after the last await: a lease that ran out while the
  // fence was read (a paused worker) or a writer fenced or closed meanwhile starts nothing
  if (!env.writer.mayStartEffect())
    return skippedOutput(call, 'not run: this writer no longer holds the session (fenced, lease lost or closed)');
  const clock = env.clock;
  let timedOut = false;
  const timeout = tool.timeoutMs
    ? clock.setTimeout(() => {
        timedOut = true;
        ac.abort(new Error(`timed out after ${tool.timeoutMs} ms`));
      }, tool.timeoutMs)
    : undefined;
  const startedAt = clock.now();
  const running = new RunningCall(env.writer, requests);
  env.emit({ type: 'tool_start', callId: call.callId, name: call.name, arguments: call.arguments }, env.callSeqs.get(call.callId));
  // `signal` is read lazily (a tool that never looks at it costs no AbortController), through an
  // own enumerable getter so that `{ ...ctx }` keeps it — defined with one shared descriptor:
  // a getter written in the object literal would be a new closure per call, on V8's slow path.
  let ended = false; // an update emitted after the call's outcome is known is dropped
  const ctx = {
    [CALL_ABORT]: ac,
    [CALL_RUNTIME]: running,
    [CALL_ACTOR]: self,
    idempotencyKey: call.idempotencyKey,
    sessionId: env.sessionId,
    runId,
    callId: call.callId,
    callSeq: env.callSeqs.get(call.callId),
    // refused at the call (a ValidationError the tool gets): subscribers and web streams serialize it
    emit: (update: unknown) => {
      assertJson(update, 'ctx.emit: update');
      if (!ended) env.emit({ type: 'tool_update', callId: call.callId, name: call.name, update });
    },
  };
  Object.defineProperty(ctx, 'signal', SIGNAL_GETTER);
  // an agentTool's call: its child spends from the batch's pool (what the run left, shared by the batch's children)
  if (tool.resumable && input.budget) {
    const pool = env.budgets?.forBatch(input.budget.batch, input.budget.left);
    if (pool) Object.defineProperty(ctx, CHILD_BUDGET, { value: pool, enumerable: true }); // kept by `{ ...ctx }`
  }
  const toolCtx = ctx as typeof ctx & ToolContext;
  let value: unknown;
  try {
    value = env.tracer
      ? env.tracer.inToolCall(call.callId, () => tool.execute(call.arguments, toolCtx))
      : tool.execute(call.arguments, toolCtx);
  } catch (e) {
    value = Promise.reject(e);
  }
  if (typeof (value as PromiseLike<unknown> | undefined)?.then !== 'function') {
    // a synchronous tool: its outcome is known now, no promise, grace timer or abort hook needed
    if (timeout !== undefined) clock.clearTimeout(timeout);
    ended = true;
    let outcome: ToolOutcome;
    try {
      outcome = withCallLocks(normalizeOutcome(value, call.name), call);
    } catch (e) {
      outcome = errorOutcome(e); // a returned value that throws when read (a getter, a proxy)
    }
    return { callId: call.callId, name: call.name, outcome, startedAt, endedAt: clock.now() };
  }
  const work = (async () => {
    try {
      return withCallLocks(normalizeOutcome(await value, call.name), call);
    } catch (e) {
      if (ac.aborted) {
        return {
          kind: 'cancelled',
          settled: true,
          partialContent: timedOut ? `timed out after ${tool.timeoutMs} ms` : `cancelled: ${messageOf(e)}`,
          resourceLocks: call.resources,
        } as ToolOutcome;
      }
      return errorOutcome(e);
    }
  })();
  // The tool's outcome — or, once it was aborted and has not settled within cancelGraceMs,
  // uncertain-hanging (it may still be running); an agentTool's call is never uncertain: its child
  // was asked to cancel and settles in its own log, so the call is cancelled, unsettled.
  let graceTimer: unknown;
  let offArm = () => {};
  const settled = new Promise<ToolOutcome>((resolve) => {
    void work.then(resolve, (e: unknown) => resolve(errorOutcome(e)));
    offArm = ac.onAbort(() => {
      graceTimer = clock.setTimeout(
        () =>
          resolve(
            call.resumable
              ? {
                  kind: 'cancelled',
                  settled: false,
                  partialContent:
                    `cancelled; the call did not stop within ${env.config.cancelGraceMs} ms ` + '(its child session settles on its own)',
                  resourceLocks: call.resources,
                }
              : {
                  kind: 'uncertain-hanging',
                  content:
                    `the tool did not stop within ${env.config.cancelGraceMs} ms after it was ${timedOut ? 'timed out' : 'cancelled'}; ` +
                    `it may still be running`,
                  resourceLocks: call.resources,
                },
          ),
        env.config.cancelGraceMs,
      );
    });
  });
  try {
    const outcome = await settled;
    // a call left unsettled (an agent call whose child waits for an answer or detached) has no result yet
    const unsettled = outcome.kind === 'completed' ? running.unsettled : undefined;
    return { callId: call.callId, name: call.name, outcome, startedAt, endedAt: clock.now(), ...(unsettled ? { unsettled } : {}) };
  } finally {
    ended = true;
    if (timeout !== undefined) clock.clearTimeout(timeout);
    if (graceTimer !== undefined) clock.clearTimeout(graceTimer);
    offArm();
  }
}
