import { hash } from 'node:crypto';
import { z } from 'zod';
import { CancelledError, ProviderError } from '../contracts/errors.js';
import { FinishReason, Usage } from '../contracts/message.js';
import { parseInput } from '../contracts/validate.js';
import { IdInput } from '../contracts/ids.js';
import type { ModelProvider, ModelRequest, ModelResponse, ModelStreamEvent } from '../contracts/model.js';

/** One scripted model turn: a text answer, tool calls, or an error to throw. */
export type ScriptedStep =
  | string
  | {
      text?: string;
      toolCalls?: { id?: string; name: string; arguments: unknown }[];
      finishReason?: FinishReason;
      usage?: Usage;
      /** Milliseconds to wait before answering (honours the abort signal). */
      delayMs?: number;
    }
  | { error: { message: string; retryable: boolean; code?: string; partialOutput?: boolean } }
  | ((request: ModelRequest) => ScriptedStep);

const StepObject = z.strictObject({
  text: z.string().optional(),
  toolCalls: z.array(z.strictObject({ id: IdInput.optional(), name: z.string(), arguments: z.unknown() })).optional(),
  finishReason: FinishReason.optional(),
  usage: Usage.optional(),
  delayMs: z.number().nonnegative().optional(),
});
const StepError = z.strictObject({
  error: z.strictObject({
    message: z.string(),
    retryable: z.boolean(),
    code: z.string().optional(),
    partialOutput: z.boolean().optional(),
  }),
});
/** A ScriptedStep (a function step is checked when it returns its step). */
const Step = z.union([z.string(), z.custom<(r: ModelRequest) => ScriptedStep>((v) => typeof v === 'function'), StepError, StepObject]);
const ScriptedOptions = z.strictObject({ modelId: z.string().min(1).optional(), loop: z.boolean().optional() });

export interface ScriptedModel extends ModelProvider {
  /** Every request received, by reference (recording costs nothing per step). */
  readonly requests: ModelRequest[];
  /** How many steps are left. */
  readonly remaining: number;
}

/**
 * A deterministic model for tests and the offline demo: each call consumes the next step.
 * Tool-call arguments given as objects are sent as JSON text; strings are sent verbatim (so a
 * test can send broken JSON). Running out of steps is a non-retryable ProviderError.
 * @example
 * const model = scriptedModel([{ toolCalls: [{ name: 'add', arguments: { a: 1, b: 2 } }] }, 'It is 3.'])
 */
export function scriptedModel(steps: readonly ScriptedStep[], options: { modelId?: string; loop?: boolean } = {}): ScriptedModel {
  // checked, not copied: the steps array is used as given (a test may append steps later)
  parseInput(z.array(Step), steps, 'scriptedModel: steps');
  parseInput(ScriptedOptions, options, 'scriptedModel: options');
  const requests: ModelRequest[] = [];
  let i = 0;
  return {
    modelId: options.modelId ?? 'scripted',
    providerName: 'actorloop.scripted',
    requests,
    get remaining() {
      return options.loop ? Infinity : steps.length - i;
    },
    async call(request: ModelRequest, onEvent: (e: ModelStreamEvent) => void): Promise<ModelResponse> {
      requests.push(request);
      if (request.signal.aborted) throw new CancelledError('model call cancelled');
      if (i >= steps.length) {
        if (!options.loop || steps.length === 0)
          throw new ProviderError('scripted model has no steps left', { retryable: false, code: 'script_exhausted' });
        i = 0;
      }
      const n = i;
      let step = steps[i++]!;
      const computed = typeof step === 'function';
      while (typeof step === 'function') step = step(request);
      // the array was checked when the model was made; a function's step is checked now
      const checked = computed ? Step.safeParse(step) : undefined;
      if (checked && !checked.success)
        throw new ProviderError(`scripted step ${n} is not a ScriptedStep: ${checked.error.issues[0]?.message ?? 'invalid'}`, {
          retryable: false,
          code: 'script_invalid',
        });
      if (typeof step === 'string') step = { text: step };
      if ('error' in step) {
        throw new ProviderError(step.error.message, {
          retryable: step.error.retryable,
          code: step.error.code ?? 'scripted',
          partialOutput: step.error.partialOutput ?? false,
        });
      }
      if (step.delayMs) await sleep(step.delayMs, request.signal);
      const text = step.text ?? '';
      if (text) onEvent({ type: 'text_delta', text });
      // Deterministic ids, unique within a conversation also across processes and compactions: the
      // request's length alone repeats once a compaction shrank it, so the last message (which
      // names the previous call's id, or is new text) is folded in. O(1) per call.
      const tag = step.toolCalls?.some((c) => c.id === undefined) ? callTag(request) : '';
      const toolCalls = (step.toolCalls ?? []).map((c, k) => ({
        id: c.id ?? `call_${request.messages.length}_${k}_${tag}`,
        name: c.name,
        arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments ?? {}),
      }));
      return {
        message: { role: 'assistant', content: text, ...(toolCalls.length ? { toolCalls } : {}) },
        usage: step.usage ?? { inputTokens: 10, outputTokens: Math.max(1, Math.ceil(text.length / 4)) },
        finishReason: step.finishReason ?? (toolCalls.length ? 'tool_calls' : 'stop'),
      };
    },
  };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(new CancelledError('model call cancelled'));
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

function callTag(request: ModelRequest): string {
  const last = request.messages.at(-1);
  return hash('sha256', `${request.messages.length}\u0000${last ? JSON.stringify(last) : ''}`, 'hex').slice(0, 10);
}
