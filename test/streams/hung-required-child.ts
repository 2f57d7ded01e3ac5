/**
 * A process whose only subscriber is a required one that never answers (its deliveries time out
 * after 50 ms; its queue holds 2) runs three prompts that each publish more envelopes than that,
 * and prints each result's status: nothing but the subscriber's timeouts can free the room the
 * runs wait for. It ends by itself (no process.exit): the process must not exit while a run waits
 * for that room (required-subscribers.test.ts).
 */
import { createRuntime, memoryStore, type ModelProvider } from '../../src/index.js';

const model: ModelProvider = {
  modelId: 'chatty',
  async call(_req, onEvent) {
    for (let i = 0; i < 20; i++) onEvent({ type: 'text_delta', text: 'x' });
    return { message: { role: 'assistant', content: 'done' }, usage: { inputTokens: 1, outputTokens: 1 }, finishReason: 'stop' };
  },
};
const runtime = createRuntime({ store: memoryStore(), model });
const session = await runtime.openSession('s');
session.subscribe(() => new Promise<void>(() => {}), { name: 'hung', required: true, deliveryTimeoutMs: 50, capacity: 2 });
for (let k = 0; k < 3; k++) console.log(`RUN ${k} ${(await session.run('go').result).status}`);
await runtime.close();
console.log('CLOSED');
