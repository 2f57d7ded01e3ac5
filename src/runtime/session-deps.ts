import type { SessionServices } from '../actors/session-services.js';
import type { RecoveryOutcome } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import type { OpenRunState } from '../persistence/open-run.js';
import type { EnvelopeStream } from '../streams/envelopes.js';
import type { QueuedInput } from './input-queue.js';
import type { ResolvedRuntimeOptions } from './options.js';
import type { ToolSet } from './tool-set.js';

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
  /** The tools of an attempt starting now (a live list's, e.g. an MCP server's, as it is now) and its execution-profile fingerprint. */
  toolSet: () => ToolSet;
  openRun?: OpenRunState;
  recovery: RecoveryOutcome;
  inputs: QueuedInput[];
  stateContext: unknown;
  isKilled(): boolean;
}
