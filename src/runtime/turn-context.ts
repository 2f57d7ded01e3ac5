import type { Message } from '../contracts/message.js';
import type { SessionServices } from '../actors/session-services.js';
import type { RunInput } from '../machines/run.machine.js';

/** The frozen context a run was started with (DESIGN §6 `turnContexts`). */
export interface TurnContext {
  runId: string;
  turn: number;
  modelId: string;
  systemPrompt?: string;
  messages: readonly Message[];
  tools: readonly string[];
  policyRevision: string;
}

/**
 * The context `input`'s run starts from. `messages` is a view: the surface array is only ever
 * appended to (a compaction replaces it), so the context keeps a reference and a length and
 * copies on first read — memory grows with the conversation, not with runs × history.
 */
export function turnContextOf(input: RunInput, env: SessionServices, systemPrompt: string | undefined, fingerprint: string): TurnContext {
  const prefix = env.prefix;
  const surface = env.surface.messages;
  const upTo = surface.length;
  const extra = input.messages;
  let messages: readonly Message[] | undefined;
  return Object.freeze({
    runId: input.runId,
    turn: input.turn,
    modelId: env.model.modelId,
    ...(systemPrompt !== undefined ? { systemPrompt } : {}),
    get messages() {
      return (messages ??= Object.freeze([...prefix, ...surface.slice(0, upTo), ...extra]));
    },
    tools: Object.freeze([...(input.offered?.tools.keys() ?? [])]),
    policyRevision: fingerprint,
  });
}
