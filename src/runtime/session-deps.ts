import type { SessionServices } from '../actors/session-services.js';
import type { RecoveryOutcome } from '../contracts/requests.js';
import type { EventStore } from '../persistence/event-store.js';
import type { OpenRunState } from '../persistence/open-run.js';
import type { EnvelopeStream } from '../streams/envelopes.js';
import type { SubscriberHub } from '../streams/subscribers.js';
import type { InputQueue } from './input-queue.js';
import type { LoopBudget } from '../contracts/config.js';
import type { ResolvedRuntimeOptions } from './options.js';
import type { ToolSet } from './tool-set.js';
import type { OutputSpec } from '../actors/final-output.js';
import type { ResumeMode } from './auto-resume.js';

/** What `openSession` hands a new ExecutionSession: its services built whole, nothing left to assign. */
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
  /** The runtime's output schema (`options.output`), built once per runtime. */
  runtimeOutput: OutputSpec | undefined;
  /** The budget of a run that started with agent `name` (SessionAgent.budgetOfRun); `options.budget` without it. */
  runBudget?: (name: string | undefined) => LoopBudget;
  openRun?: OpenRunState;
  recovery: RecoveryOutcome;
  /** The session's inputs; `env`'s steers are read from it. */
  inputs: InputQueue;
  /** The session's subscribers; `env.backpressure` waits on it. */
  hub: SubscriberHub;
  stateContext: unknown;
  isKilled(): boolean;
  /** What a new run does over an interrupted run (auto-resume.ts); `auto` unless said. */
  resume?: ResumeMode;
}
