import type { SessionServices } from '../actors/session-services.js';
import type { RunInput } from '../machines/run.machine.js';
import type { EnvelopeStream } from '../streams/envelopes.js';
import type { AttemptCallers } from './attempt-callers.js';
import { followUpInput } from './attempt-input.js';
import type { InputQueue } from './input-queue.js';
import type { ToolSet } from './tool-set.js';
import type { OutputSpec } from '../actors/final-output.js';
import type { ResolvedRuntimeOptions } from './options.js';
import { turnContextOf, type TurnContext } from './turn-context.js';

/** What starting an attempt touches of its session. */
export interface StartingSession {
  env: SessionServices;
  options: ResolvedRuntimeOptions;
  stream: EnvelopeStream;
  callers: AttemptCallers;
  inputs: InputQueue;
  /** The tools of an attempt starting now (a live list's as it is now) and its execution-profile fingerprint. */
  toolSet(): ToolSet;
  /** The runtime's output schema, built once per runtime. */
  runtimeOutput: OutputSpec | undefined;
}

/**
 * The attempts one session starts, one at a time: each one's turn context, stream ids and
 * caller, and the latest one's run input (its tools, its output schema) and the turn of the
 * latest prompt or follow-up.
 */
export class AttemptStarts {
  /** The frozen context each run started from, by run id. */
  readonly turnContexts = new Map<string, TurnContext>();
  /** The turn of the session's latest prompt or follow-up. */
  lastTurn: number;
  /** The run input of the attempt begun last (undefined before the first). */
  latest: RunInput | undefined;

  constructor(
    private readonly s: StartingSession,
    lastTurn: number,
  ) {
    this.lastTurn = lastTurn;
  }

  /** The attempt `input` starts: its turn context, its stream ids, its caller (`token`'s, or `caller`). */
  begin(input: RunInput, token?: number): void {
    const { env, options, stream } = this.s;
    this.latest = input;
    if (input.kind === 'prompt' || input.kind === 'follow_up') this.lastTurn = input.turn;
    // the context a run *started* from: a respond or continue attempt keeps its run's entry
    if (input.kind === 'prompt' || input.kind === 'follow_up' || !this.turnContexts.has(input.runId)) {
      this.turnContexts.set(input.runId, turnContextOf(input, env, options.systemPrompt, input.executionProfileFingerprint));
    }
    stream.runId = input.runId;
    stream.attemptId = input.attemptId;
    this.s.callers.started(input.runId, input.attemptId, token);
  }

  /**
   * Takes the oldest waiting input (a follow-up, or a steer no run took) and begins its run, whose
   * input it returns; undefined if none waits. The session checks first that it is free.
   */
  beginWaiting(): RunInput | undefined {
    const f = this.s.inputs.takeNext();
    if (!f) return undefined;
    const run = followUpInput(f, {
      toolSet: this.s.toolSet(),
      options: this.s.options,
      runtimeOutput: this.s.runtimeOutput,
      now: this.s.env.clock.now(),
      lastTurn: this.lastTurn,
    });
    this.begin(run);
    return run;
  }
}
