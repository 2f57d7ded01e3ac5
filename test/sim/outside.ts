/**
 * The world outside the runtime, as the simulator plays it: a model provider that errors, stalls,
 * cuts streams mid-chunk and sends malformed calls by seed; tools (parallel, exclusive, with
 * resources, with a reconcile hook, with approval) that hang, fail, complete late or complete after
 * their process crashed; a delivery owner; verifiers. Each keeps its own ledger of what really
 * happened, which the invariants hold the log against.
 */
import { z } from 'zod';
import { CancelledError, ProviderError } from '../../src/contracts/errors.js';
import type { ModelMessage as Message } from '../../src/contracts/message.js';
import type { ModelProvider, ModelRequest, ModelResponse, ModelStreamEvent } from '../../src/contracts/model.js';
import type { DeliveryOwner, FinalAnswer } from '../../src/contracts/hooks.js';
import { defineTool, type AnyTool } from '../../src/tools/define-tool.js';
import type { Watch } from './watch.js';
import { never, type Proc, type World } from './world.js';

export const COMPACTION_PROMPT = 'SIM: summarise the conversation so far';

export interface OutsideFaults {
  modelRetryable: number;
  modelFatal: number;
  modelStall: number;
  modelCut: number;
  modelMalformed: number;
  modelInvalid: number;
  toolFail: number;
  toolLate: number;
  toolHang: number;
  toolStubborn: number;
  deliveryThrow: number;
  verifierReject: number;
  finalReject: number;
}

export const NO_OUTSIDE_FAULTS: OutsideFaults = {
  modelRetryable: 0,
  modelFatal: 0,
  modelStall: 0,
  modelCut: 0,
  modelMalformed: 0,
  modelInvalid: 0,
  toolFail: 0,
  toolLate: 0,
  toolHang: 0,
  toolStubborn: 0,
  deliveryThrow: 0,
  verifierReject: 0,
  finalReject: 0,
};

/** One execution of a tool call, as the tool itself saw it. */
export interface ToolRun {
  key: string;
  callId: string;
  name: string;
  mode: 'parallel' | 'exclusive';
  proc: number;
  /** The effect happened (for exclusive tools: the side effect the world must never see twice). */
  effect: boolean;
}

export class Ledgers {
  readonly toolRuns: ToolRun[] = [];
  readonly reconciles: { key: string; found: boolean; proc: number }[] = [];
  readonly deliveries: { sessionId: string; finalMessageId: string; proc: number }[] = [];
  /** Problems seen from outside while the seed ran (e.g. an invalid conversation sent to the model). */
  readonly problems: string[] = [];
  effectOf(key: string): ToolRun | undefined {
    return this.toolRuns.find((r) => r.key === key && r.effect);
  }
}

export interface Outside {
  world: World;
  ledgers: Ledgers;
  /** What the durable store holds at each instant: asked when a tool starts. */
  watch: Watch;
  faults: OutsideFaults;
  /** Ids of the tool calls the model makes: unique in the whole world. */
  nextCallId(): string;
  /** Broken variant: charge's reconcile runs the charge again instead of looking it up. */
  reexecute?: boolean;
  /** Model rounds of tool calls before it answers (at most). */
  maxToolRounds: number;
}

/** Every assistant tool call answered by a tool message before the next assistant message, and no tool message without its call. */
export function conversationProblem(messages: readonly Message[]): string | undefined {
  let open = new Set<string>();
  for (const [i, m] of messages.entries()) {
    if (m.role === 'assistant') {
      if (open.size > 0) return `message ${i}: assistant message while calls ${[...open].join(', ')} are unanswered`;
      open = new Set((m.toolCalls ?? []).map((c) => c.id));
    } else if (m.role === 'tool') {
      if (!m.toolCallId || !open.has(m.toolCallId))
        return `message ${i}: tool message for ${m.toolCallId ?? '(no id)'} answers no open call`;
      open.delete(m.toolCallId);
    }
  }
  return open.size > 0 ? `the request ends with calls ${[...open].join(', ')} unanswered` : undefined;
}

const cancelled = () => new CancelledError('model call cancelled');

export function simModel(o: Outside, proc: Proc): ModelProvider {
  const { world, faults: f } = o;
  const rng = world.rng;
  return {
    modelId: 'sim',
    async call(req: ModelRequest, onEvent: (e: ModelStreamEvent) => void): Promise<ModelResponse> {
      const compaction = req.messages[0]?.role === 'system' && req.messages[0].content === COMPACTION_PROMPT;
      const problem = compaction ? undefined : conversationProblem(req.messages);
      if (problem) o.ledgers.problems.push(`invalid conversation sent to the model: ${problem}`);
      await proc.sleep(rng.range(1, 20), req.signal, cancelled);
      if (rng.chance(f.modelStall)) {
        world.note('model: stall');
        await proc.sleep(1_000_000_000, req.signal, cancelled); // until aborted
      }
      if (rng.chance(f.modelRetryable)) throw new ProviderError('sim: overloaded', { retryable: true, code: 'server' });
      if (rng.chance(f.modelFatal)) throw new ProviderError('sim: bad request', { retryable: false, code: 'bad_request' });
      if (rng.chance(f.modelCut)) {
        onEvent({ type: 'text_delta', text: 'half an ans' });
        await proc.sleep(rng.range(1, 5), req.signal, cancelled);
        throw new ProviderError('sim: stream cut mid-chunk', { retryable: true, code: 'connection', partialOutput: true });
      }
      // a provider keeps to the output cap it is sent
      const usage = { inputTokens: 20, outputTokens: Math.min(rng.range(1, 40), req.maxOutputTokens ?? Infinity) };
      if (compaction) return { message: { role: 'assistant', content: `summary at t${world.now}` }, usage, finishReason: 'stop' };
      if (rng.chance(f.modelInvalid))
        return { message: { role: 'user', content: 'not an assistant' }, finishReason: 'stop' } as unknown as ModelResponse;
      // tool rounds since the last user message
      let rounds = 0;
      for (let i = req.messages.length - 1; i >= 0 && req.messages[i]!.role !== 'user'; i--)
        if (req.messages[i]!.role === 'assistant') rounds++;
      if (rounds < o.maxToolRounds && rng.int(10) < 7) {
        if (rng.chance(f.modelMalformed)) {
          const kind = rng.int(3);
          world.note(`model: malformed call (${['bad json', 'unknown tool', 'cut by length'][kind]})`);
          const call = { id: o.nextCallId(), name: kind === 1 ? 'no_such_tool' : 'lookup', arguments: kind === 0 ? '{"q": ' : '{"q":"x"}' };
          return {
            message: { role: 'assistant', content: '', toolCalls: [call] },
            usage,
            finishReason: kind === 2 ? 'length' : 'tool_calls',
          };
        }
        const menu = ['lookup', 'charge', 'notify', 'scan', 'balance', 'pay', 'askUser'];
        const first = menu[rng.int(menu.length)]!;
        const names = first === 'askUser' ? [first] : [first, ...Array.from({ length: rng.int(3) }, () => menu[rng.int(menu.length - 1)]!)];
        const toolCalls = names.map((name) => ({ id: o.nextCallId(), name, arguments: JSON.stringify(argsFor(name, rng.int(5))) }));
        for (const c of toolCalls) onEvent({ type: 'toolcall_delta', index: 0, callId: c.id, name: c.name, argumentsDelta: c.arguments });
        return { message: { role: 'assistant', content: '', toolCalls }, usage, finishReason: 'tool_calls' };
      }
      const text = `answer at t${world.now - 1_700_000_000_000}`;
      onEvent({ type: 'text_delta', text });
      return { message: { role: 'assistant', content: text }, usage, finishReason: 'stop' };
    },
  };
}

function argsFor(name: string, n: number): Record<string, unknown> {
  switch (name) {
    case 'askUser':
      return { question: `which one, ${n}?` };
    case 'charge':
    case 'pay':
      return { amount: n + 1 };
    case 'notify':
      return { text: `note ${n}` };
    default:
      return { q: `q${n}` };
  }
}

type Behaviour = 'ok' | 'fail' | 'late' | 'hang' | 'stubborn';

/**
 * A tool call's effect in the world (the tools of outside.ts and tree-outside.ts): it lands on a
 * world timer — 1–25 ms, 50–400 ms when `late` — even if the process crashed meanwhile (`entry`
 * records it), and its answer reaches only a live process; `hang` answers only its signal,
 * `stubborn` not even that.
 */
export function effectInWorld(
  world: World,
  proc: Proc,
  entry: ToolRun,
  b: Behaviour,
  name: string,
  args: unknown,
  ctx: { signal: AbortSignal; idempotencyKey: string },
): Promise<string> {
  const rng = world.rng;
  return new Promise<string>((resolve, reject) => {
    if (b === 'stubborn') return; // ignores its signal and never answers
    let t: ReturnType<World['at']> | undefined;
    const onAbort = () => {
      world.clear(t);
      proc.whenRunning(() => reject(new Error(`${name} aborted`)));
    };
    ctx.signal.addEventListener('abort', onAbort, { once: true });
    if (b === 'hang') return; // answers only its signal
    const ms = b === 'late' ? rng.range(50, 400) : rng.range(1, 25);
    // a world timer: the effect lands even if the process crashed meanwhile (completes after a crash)
    t = world.at(world.now + ms, () => {
      ctx.signal.removeEventListener('abort', onAbort);
      entry.effect = true;
      proc.whenRunning(() =>
        b === 'fail' ? reject(new Error(`${name} failed`)) : resolve(`done:${ctx.idempotencyKey}:${JSON.stringify(args)}`),
      );
    });
  });
}

/**
 * A reconcile that asks the world's ledger: the effect that landed is reconciled; a call never
 * started says so; one started and still out there cannot tell (undefined).
 */
export function reconcileFromLedger(ledgers: Ledgers, proc: Proc, ctx: { idempotencyKey: string }) {
  const done = ledgers.effectOf(ctx.idempotencyKey);
  ledgers.reconciles.push({ key: ctx.idempotencyKey, found: done !== undefined, proc: proc.id });
  if (done) return { kind: 'completed' as const, content: `reconciled:${ctx.idempotencyKey}` };
  const started = ledgers.toolRuns.some((r) => r.key === ctx.idempotencyKey);
  return started ? undefined : { kind: 'completed' as const, content: `reconciled-not-run:${ctx.idempotencyKey}`, isError: true };
}
type Ctx = { signal: AbortSignal; idempotencyKey: string; callId: string; sessionId: string };

/** The sim's tools, bound to one process: their effects land in the world, their answers reach only a live process. */
export function simTools(o: Outside, proc: Proc): AnyTool[] {
  const { world, ledgers, faults: f } = o;
  const rng = world.rng;
  const behaviour = (): Behaviour =>
    rng.chance(f.toolFail)
      ? 'fail'
      : rng.chance(f.toolLate)
        ? 'late'
        : rng.chance(f.toolHang)
          ? 'hang'
          : rng.chance(f.toolStubborn)
            ? 'stubborn'
            : 'ok';
  const run = (name: string, mode: 'parallel' | 'exclusive', args: unknown, ctx: Ctx) => {
    o.watch.toolStarted(proc.id, ctx.sessionId, { callId: ctx.callId, name, mode });
    const entry: ToolRun = { key: ctx.idempotencyKey, callId: ctx.callId, name, mode, proc: proc.id, effect: false };
    ledgers.toolRuns.push(entry);
    const b = behaviour();
    if (b !== 'ok') world.note(`tool ${name} ${ctx.callId}: ${b}`);
    return effectInWorld(world, proc, entry, b, name, args, ctx);
  };
  const reconcileCharge = (a: unknown, ctx: Ctx) => {
    if (o.reexecute) return run('charge', 'exclusive', a, ctx).then((content) => ({ kind: 'completed' as const, content }));
    return reconcileFromLedger(ledgers, proc, ctx);
  };
  // the definitions (and their JSON Schemas) are made once; each process binds its own execute
  return TOOL_DEFS.map((t) => ({
    ...t,
    execute: (a: unknown, ctx: Ctx) => run(t.name, t.mode, a, ctx),
    ...(t.name === 'charge' ? { reconcile: reconcileCharge } : {}),
  })) as AnyTool[];
}

const Q = z.object({ q: z.string() });
const Amount = z.object({ amount: z.number() });
const unbound = (): string => {
  throw new Error('bound per process by simTools');
};
const TOOL_DEFS: AnyTool[] = [
  defineTool({ name: 'lookup', description: 'read', mode: 'parallel', parameters: Q, execute: unbound }),
  defineTool({
    name: 'scan',
    description: 'read a resource',
    mode: 'parallel',
    resources: ['disk'],
    timeoutMs: 60,
    parameters: Q,
    execute: unbound,
  }),
  // parallel, on the resource the exclusive calls hold when they end uncertain (the lock rule)
  defineTool({
    name: 'balance',
    description: 'read the account',
    mode: 'parallel',
    resources: ['acct'],
    timeoutMs: 80,
    parameters: Q,
    execute: unbound,
  }),
  defineTool({
    name: 'charge',
    description: 'side effect, reconcilable',
    mode: 'exclusive',
    resources: ['acct'],
    timeoutMs: 300,
    parameters: Amount,
    execute: unbound,
    reconcile: () => undefined,
  }),
  defineTool({
    name: 'notify',
    description: 'side effect',
    mode: 'exclusive',
    parameters: z.object({ text: z.string() }),
    execute: unbound,
  }),
  defineTool({
    name: 'pay',
    description: 'needs approval',
    mode: 'exclusive',
    resources: ['acct'],
    needsApproval: true,
    parameters: Amount,
    execute: unbound,
  }),
];

export function simDelivery(o: Outside, proc: Proc, idempotent: boolean): DeliveryOwner {
  return {
    idempotent,
    async deliver(final: FinalAnswer) {
      o.ledgers.deliveries.push({ sessionId: final.sessionId, finalMessageId: final.finalMessageId, proc: proc.id });
      await proc.sleep(o.world.rng.range(1, 10));
      if (!proc.alive) return never();
      if (o.world.rng.chance(o.faults.deliveryThrow)) throw new Error('sim: delivery failed');
    },
  };
}
