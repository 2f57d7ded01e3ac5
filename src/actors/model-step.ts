import { fromPromise } from 'xstate';
import { CancelledError, CapacityError, isCancelledError, isProviderError, ProviderError } from '../contracts/errors.js';
import type { Message, Usage } from '../contracts/message.js';
import type { ModelResponse } from '../contracts/model.js';
import { resourcesOf } from '../tools/define-tool.js';
import { validateToolCalls } from '../tools/validate-calls.js';
import { compact } from './compaction.js';
import type { RunEnv } from './run-env.js';

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
}

export interface ModelStepInput {
  runId: string;
  /** Seq of this attempt's run/start: compaction keeps everything from here on. */
  runStartSeq: number;
  at: StepAt;
  corrections: number;
}

export type ModelStepOutput = { usage?: Usage; cost?: string } & (
  | { kind: 'tools'; calls: CallDescr[] }
  | { kind: 'final'; content: string }
  | { kind: 'rejected' }
  | { kind: 'blocked'; locks: string[] }
);

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(new CancelledError());
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(t), reject(new CancelledError())), { once: true });
  });

/** Calls the model with the runtime's retries; each failed attempt is staged as `assistant/attempt`. */
async function callWithRetries(env: RunEnv, at: StepAt, signal: AbortSignal): Promise<{ res: ModelResponse; latencyMs: number; digest: string }> {
  const digest = env.surface.requestDigest(env.prefixDigest, env.toolCatalogDigest);
  const messages: Message[] = [...env.prefix, ...env.surface.messages];
  for (let n = 1; ; n++) {
    const t0 = performance.now();
    let started = false;
    try {
      const res = await env.model.call({ messages, tools: env.toolSpecs, signal }, (e) => {
        if (e.type !== 'text_delta') return;
        if (!started) env.emit({ type: 'message_start', role: 'assistant' });
        started = true;
        env.emit({ type: 'message_delta', role: 'assistant', text: e.text });
      });
      return { res, latencyMs: performance.now() - t0, digest };
    } catch (e) {
      if (signal.aborted || isCancelledError(e)) throw new CancelledError('model call cancelled');
      const pe = isProviderError(e) ? e : new ProviderError(`model call failed: ${(e as Error)?.message ?? String(e)}`, { retryable: false, code: 'unknown', cause: e });
      env.writer.stage('assistant/attempt', at, {
        attemptNumber: n,
        requestDigest: digest,
        latencyMs: performance.now() - t0,
        error: { name: pe.name, message: pe.message, code: pe.providerCode, retryable: pe.retryable, partialOutput: pe.partialOutput },
      });
      if (!pe.retryable || n >= env.config.maxProviderAttempts) throw pe;
      await sleep(pe.retryAfterMs ?? env.config.retryBackoffMs * 2 ** (n - 1), signal);
    }
  }
}

/**
 * One model step up to the tool batch: context (compacting when needed), the model call with
 * retries, validation, and the step's first commit point (assistant message + tool-call intents).
 */
export const modelStepActor = (env: RunEnv) =>
  fromPromise<ModelStepOutput, ModelStepInput>(async ({ input, signal: actorSignal }) => {
    const { at, runId } = input;
    const signal = AbortSignal.any([actorSignal, env.cancelSignal]);
    const limit = env.config.contextWindow - env.config.outputReserve;
    if (env.prefixTokens + env.surface.tokens > limit) {
      await compact(env, at, input.runStartSeq, signal);
      const size = env.prefixTokens + env.surface.tokens;
      if (size > limit) throw new CapacityError(size, limit);
    }
    env.writer.stage('step/start', at, {});
    env.emit({ type: 'step_start', step: at.step });

    const { res, latencyMs, digest } = await callWithRetries(env, at, signal);
    const message: Message = { ...res.message, role: 'assistant' };
    env.writer.stage('assistant/message', at, {
      message,
      ...(res.usage ? { usage: res.usage } : {}),
      finishReason: res.finishReason,
      latencyMs,
      requestDigest: digest,
    });
    env.emit({ type: 'message_end', role: 'assistant', message });
    const usage = res.usage;
    const priced = env.pricing && usage ? { cost: env.pricing(usage, env.model.modelId) } : {};
    const calls = message.toolCalls ?? [];
    if (calls.length === 0) return { kind: 'final', content: message.content, usage, ...priced };

    const { calls: valid, issues } = validateToolCalls(calls, env.tools, res.finishReason);
    if (issues.length > 0) {
      env.writer.stage('tool/batch-rejected', at, { issues });
      env.writer.stage('step/end', at, usage ? { usage } : {});
      await env.writer.commit();
      return { kind: 'rejected', usage, ...priced };
    }
    const descrs: CallDescr[] = valid.map((c) => ({
      callId: c.callId,
      name: c.name,
      arguments: c.arguments,
      mode: c.tool.mode,
      resources: resourcesOf(c.tool, c.arguments),
      idempotencyKey: `${env.sessionId}/${runId}/${c.callId}`,
    }));
    const held = [...new Set(descrs.flatMap((d) => d.resources.filter((r) => env.heldLocks.has(r))))];
    if (held.length > 0) {
      for (const d of descrs) {
        env.writer.stage('tool/result', at, {
          callId: d.callId,
          name: d.name,
          outcome: { kind: 'skipped', reason: `blocked: resources ${held.join(', ')} are locked by an uncertain earlier call` },
        });
      }
      env.writer.stage('step/end', at, usage ? { usage } : {});
      await env.writer.commit();
      return { kind: 'blocked', locks: held, usage, ...priced };
    }
    for (const d of descrs) env.writer.stage('tool/call', at, { ...d });
    await env.writer.commit();
    return { kind: 'tools', calls: descrs, usage, ...priced };
  });
