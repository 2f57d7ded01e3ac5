import { createStore } from '@xstate/store';
import type { ExecutionResult } from '../contracts/requests.js';
import type { Message } from '../contracts/message.js';
import type { PendingRequest } from '../contracts/events.js';

/**
 * What a session is doing (`snapshot().status`): resting `idle`, `suspended` (a run waits for an
 * approval or answer: respond), `detached` (a run is open and resumable: continue); an attempt
 * `preparing` / `executing` / `finalizing`; `fenced` (another writer took over); `closing` / `closed`.
 */
export type SessionStatus = 'idle' | 'suspended' | 'detached' | 'preparing' | 'executing' | 'finalizing' | 'fenced' | 'closing' | 'closed';

/** JSON state of a session for UIs and debugging (`session.snapshot()`). */
export interface SessionSnapshot {
  sessionId: string;
  status: SessionStatus;
  /** The run machine's state while an attempt runs (e.g. `callingModel`, `runningTools`), else `status`. */
  phase: string;
  messages: Message[];
  step: number;
  toolCalls: number;
  tokens: number;
  cost: string;
  recoveries: number;
  usage?: ExecutionResult['usage'];
  /** The approval or question the open run waits for (status `suspended`). */
  pending?: PendingRequest;
  lastError?: { kind: NonNullable<ExecutionResult['error']>['kind']; message: string };
}

/** An `@xstate/store` store holding a session's snapshot, kept current by the session. */
export function makeView(initial: SessionSnapshot) {
  return createStore({
    context: initial,
    on: { sync: (_ctx: SessionSnapshot, e: { snapshot: SessionSnapshot }) => e.snapshot },
  });
}
