import type { SessionServices } from '../actors/session-services.js';
import type { RecoveryOutcome } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import type { OpenRunState } from '../persistence/open-run.js';
import type { EnvelopeStream } from '../streams/envelopes.js';
import type { QueuedInput } from './input-queue.js';
import type { ResolvedRuntimeOptions } from './options.js';

/** What `openSession` hands a new ExecutionSession. */
export interface SessionDeps {
  sessionId: string;
  sessionInstanceId: string;
  writerEpoch: number;
  lastTurn: number;
  env: SessionServices;
  store: EventStore;
  options: ResolvedRuntimeOptions;
  stream: EnvelopeStream;
  /** The execution-profile fingerprint now (it follows the tools' revisions, e.g. an MCP server's list). */
  fingerprint: () => string;
  openRun?: OpenRunState;
  recovery: RecoveryOutcome;
  inputs: QueuedInput[];
  stateContext: unknown;
  isKilled(): boolean;
}
