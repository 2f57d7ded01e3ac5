import { afterAll, beforeAll, beforeEach } from 'vitest';
import { startAnthropicServer } from './anthropic-server.js';
import { startOpenAIServer } from './openai-server.js';
import { startResponsesServer } from './responses-server.js';
import type { ScriptedServer } from './sse-server.js';

/** The three wire servers a test file runs a behaviour over. */
export interface ProviderServers {
  openai: ScriptedServer;
  anthropic: ScriptedServer;
  responses: ScriptedServer;
}

/**
 * Starts the Chat Completions, Messages and Responses servers before the file's tests, forgets
 * their requests and queued replies before each test, and closes them after. Call at the top level
 * of a test file; the servers it returns stand for the ones started (usable from the tests on).
 * @example
 * const { openai, anthropic, responses } = providerServers()
 */
export function providerServers(): ProviderServers {
  let started: ProviderServers | undefined;
  beforeAll(async () => {
    const [openai, anthropic, responses] = await Promise.all([startOpenAIServer(), startAnthropicServer(), startResponsesServer()]);
    started = { openai, anthropic, responses };
  });
  afterAll(async () => {
    if (started) await Promise.all([started.openai.close(), started.anthropic.close(), started.responses.close()]);
  });
  beforeEach(() => {
    started?.openai.reset();
    started?.anthropic.reset();
    started?.responses.reset();
  });
  const of = (name: keyof ProviderServers): ScriptedServer => {
    if (!started) throw new Error(`the ${name} server is started before the file's tests: use it from a test or a hook`);
    return started[name];
  };
  const late = (name: keyof ProviderServers): ScriptedServer => ({
    get baseURL() {
      return of(name).baseURL;
    },
    get requests() {
      return of(name).requests;
    },
    reply: (...replies) => of(name).reply(...replies),
    lastBody: () => of(name).lastBody(),
    reset: () => of(name).reset(),
    close: () => of(name).close(),
  });
  return { openai: late('openai'), anthropic: late('anthropic'), responses: late('responses') };
}
