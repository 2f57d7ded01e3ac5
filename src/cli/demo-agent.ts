import { z } from 'zod';
import { CancelledError } from '../contracts/errors.js';
import type { ModelMessage } from '../contracts/message.js';
import { contentText } from '../contracts/content.js';
import type { ModelProvider, ModelRequest, ModelStreamEvent } from '../contracts/model.js';
import { anthropicModelFromEnv } from '../providers/anthropic.js';
import { openaiModelFromEnv } from '../providers/openai.js';
import { scriptedModel, type ScriptedStep } from '../providers/scripted.js';
import { abortableSleep } from './demo-tools.js';

export const DEMO_SYSTEM_PROMPT = [
  'You are the actorloop demo agent, a careful release assistant.',
  'Tools: read_file reads the sandbox folder (release-notes.md, service.json), calculate does arithmetic,',
  'deploy deploys a service version to an environment (slow, runs alone).',
  'Call independent read_file and calculate tools together in one message; deploy only after reading',
  'the release notes. If a deploy was interrupted and nothing was deployed, deploy again once.',
  'Finish with a short summary of what you did and the numbers you computed.',
].join(' ');

export const DEMO_PROMPT =
  'Read release-notes.md and service.json, work out the monthly error budget in minutes for a 99.9% SLO ' +
  'over 30 days and the canary size (10% of 40 pods), then deploy checkout 2.4.0 to staging.';

export const Provider = z.enum(['scripted', 'openai', 'anthropic']);
export type Provider = z.infer<typeof Provider>;

const paceError = 'a number from 0 (no delays) to 10';
/**
 * ACTORLOOP_DEMO_PACE: the factor the demo's delays are scaled by, from 0 (no delays) to 10 (ten
 * times slower); 1, the default, is the demo's own speed. A number, or its decimal digits.
 */
export const Pace = z
  .union(
    [
      z.number(),
      z
        .string()
        .regex(/^\s*(\d+(\.\d*)?|\.\d+)\s*$/)
        .transform(Number),
    ],
    { error: paceError },
  )
  .pipe(z.number().min(0, { error: paceError }).max(10, { error: paceError }));

/** The provider to use: the flag, else a real model when its API key is set, else offline. */
export function chooseProvider(flag: Provider | undefined, env: NodeJS.ProcessEnv = process.env): Provider {
  if (flag) return flag;
  if (env.OPENAI_API_KEY) return 'openai';
  if (env.ANTHROPIC_API_KEY) return 'anthropic';
  return 'scripted';
}

/** The model behind the demo agent for `provider`. */
export async function demoModel(provider: Provider, pace = 1): Promise<ModelProvider> {
  if (provider === 'openai') return openaiModelFromEnv({ model: process.env.OPENAI_MODEL ?? 'gpt-4.1-mini' });
  if (provider === 'anthropic') return anthropicModelFromEnv({ model: process.env.ANTHROPIC_MODEL ?? 'claude-haiku-4-5' });
  return paced(scriptedModel([demoPolicy], { modelId: 'scripted-demo', loop: true }), pace);
}

/** The messages answering the current prompt (after its last user message). */
function turnMessages(messages: readonly ModelMessage[]): ModelMessage[] {
  let start = 0;
  messages.forEach((m, i) => {
    if (m.role === 'user') start = i + 1;
  });
  return messages.slice(start);
}

const isDeployed = (m: ModelMessage) => m.name === 'deploy' && contentText(m.content).startsWith('deployed ');

/**
 * The offline agent: a deterministic policy of the conversation so far, so that a run resumed in
 * a fresh process (where a position-based script would start over) still takes the right step.
 * Step 1 reads and calculates in parallel; step 2 deploys (exclusive), again once if the deploy
 * was interrupted; step 3 answers.
 */
export function demoPolicy(request: ModelRequest): ScriptedStep {
  const turn = turnMessages(request.messages);
  const results = turn.filter((m) => m.role === 'tool');
  // Call ids unique in the run even when a resumed run's model starts afresh in a new process.
  const step = turn.filter((m) => m.role === 'assistant').length + 1;
  const ids = <T extends object>(calls: T[]) => calls.map((c, k) => ({ id: `c${step}_${k}`, ...c }));
  const deploys = results.filter((m) => m.name === 'deploy');
  const usage = { inputTokens: request.messages.reduce((n, m) => n + Math.ceil(contentText(m.content).length / 4), 0), outputTokens: 40 };
  if (results.length === 0) {
    return {
      text: 'Reading the release notes and service config, and doing the arithmetic in parallel.',
      toolCalls: ids([
        { name: 'read_file', arguments: { path: 'release-notes.md' } },
        { name: 'read_file', arguments: { path: 'service.json' } },
        { name: 'calculate', arguments: { expression: '(1 - 0.999) * 30 * 24 * 60' } },
        { name: 'calculate', arguments: { expression: '40 * 0.1' } },
      ]),
      usage,
    };
  }
  const done = deploys.find(isDeployed);
  if (!done && deploys.length < 2) {
    const again = deploys.length > 0;
    return {
      text: again
        ? 'The first deploy was interrupted before it took effect; deploying again.'
        : 'Release notes look good; deploying checkout 2.4.0 to staging.',
      toolCalls: ids([{ name: 'deploy', arguments: { service: 'checkout', version: '2.4.0', environment: 'staging' } }]),
      usage,
    };
  }
  const calc = results.filter((m) => m.name === 'calculate').map((m) => contentText(m.content).split(' = ').pop());
  const summary = done
    ? `Done: ${contentText(done.content)}. ` +
      `The monthly error budget for a 99.9% SLO is ${calc[0] ?? '?'} minutes, and the canary is ${calc[1] ?? '?'} pods. ` +
      'The release brings faster cart totals and one retry of card authorisation on gateway timeouts.'
    : `I could not deploy checkout 2.4.0: ${(deploys.at(-1) && contentText(deploys.at(-1)!.content)) ?? 'no deploy result'}.`;
  return { text: summary, usage: { ...usage, outputTokens: Math.ceil(summary.length / 4) } };
}

/**
 * Streams the inner model's text in small chunks at a readable pace (honouring the signal), as a
 * real model would, so the demo shows live text.
 */
export function paced(inner: ModelProvider, pace: number): ModelProvider {
  return {
    modelId: inner.modelId,
    // the wrapper paces the stream; who serves the model (span attribute) and its output mode are the inner model's
    ...(inner.providerName === undefined ? {} : { providerName: inner.providerName }),
    ...(inner.structuredOutput === undefined ? {} : { structuredOutput: inner.structuredOutput }),
    async call(request: ModelRequest, onEvent: (e: ModelStreamEvent) => void) {
      const wait = (ms: number) =>
        abortableSleep(Math.round(ms * pace), request.signal).catch(() => {
          throw new CancelledError('model call cancelled');
        });
      await wait(350);
      let text = '';
      const res = await inner.call(request, (e) => {
        if (e.type === 'text_delta') text += e.text;
        else onEvent(e);
      });
      for (const chunk of text.match(/\S+\s*/g) ?? []) {
        onEvent({ type: 'text_delta', text: chunk });
        await wait(25);
      }
      return res;
    },
  };
}
