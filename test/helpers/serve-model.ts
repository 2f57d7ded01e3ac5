import type { ModelProvider, ModelRequest } from '../../src/contracts/model.js';

/**
 * A model for many sessions at once (serve tests, fault tests, the serve bench): its answer
 * depends only on the request, never on call order. While the run has made fewer than `steps`
 * tool rounds since the newest user message, it asks for `toolsPerStep` calls of `tools` (in
 * turn, arguments naming the session's user text and the round); then it answers
 * `done: <user text>`. `latencyMs` delays every call (honouring the signal).
 */
export function toolLoopModel(o: { steps: number; toolsPerStep: number; tools: readonly string[]; latencyMs?: number }): ModelProvider {
  return {
    modelId: `tool-loop-${o.steps}x${o.toolsPerStep}`,
    async call(request: ModelRequest) {
      if (o.latencyMs) {
        await new Promise<void>((resolve, reject) => {
          const t = setTimeout(resolve, o.latencyMs);
          request.signal?.addEventListener('abort', () => (clearTimeout(t), reject(request.signal!.reason)), { once: true });
        });
      }
      const msgs = request.messages;
      let lastUser = msgs.length - 1;
      while (lastUser >= 0 && msgs[lastUser]!.role !== 'user') lastUser--;
      const text = lastUser >= 0 ? msgs[lastUser]!.content : '';
      const rounds = msgs.slice(lastUser + 1).filter((m) => m.role === 'assistant' && m.toolCalls?.length).length;
      if (rounds < o.steps) {
        const toolCalls = Array.from({ length: o.toolsPerStep }, (_, i) => ({
          id: `c${lastUser}-${rounds}-${i}`,
          name: o.tools[(rounds * o.toolsPerStep + i) % o.tools.length]!,
          arguments: JSON.stringify({ key: `${text}#${rounds}.${i}` }),
        }));
        return {
          message: { role: 'assistant' as const, content: '', toolCalls },
          finishReason: 'tool_calls' as const,
          usage: { inputTokens: 10, outputTokens: 5 },
        };
      }
      return {
        message: { role: 'assistant' as const, content: `done: ${text}` },
        finishReason: 'stop' as const,
        usage: { inputTokens: 10, outputTokens: 5 },
      };
    },
  } as ModelProvider;
}
