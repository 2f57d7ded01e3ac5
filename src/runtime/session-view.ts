import { createStore } from '@xstate/store';
import type { ExecutionResult } from '../contracts/requests.js';
import type { Message } from '../contracts/message.js';

/** JSON state of a session for UIs and debugging (`session.snapshot()`). */
export interface SessionSnapshot {
  sessionId: string;
  status: string;
  phase: string;
  messages: Message[];
  step: number;
  toolCalls: number;
  tokens: number;
  cost: string;
  recoveries: number;
  usage?: ExecutionResult['usage'];
  pending?: unknown;
  lastError?: { kind: string; message: string };
}

/** An `@xstate/store` store holding a session's snapshot, kept current by the session. */
export function makeView(initial: SessionSnapshot) {
  return createStore({
    context: initial,
    on: { sync: (_ctx: SessionSnapshot, e: { snapshot: SessionSnapshot }) => e.snapshot },
  });
}
