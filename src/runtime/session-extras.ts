import type { ExecutionRequest, ExecutionResult, RunRequest } from '../contracts/requests.js';
import { AutoResume } from './auto-resume.js';
import { PerCallApprovals } from './per-call-approvals.js';
import type { RunHandle } from './run-handle.js';
import type { SessionDeps } from './session-deps.js';
import type { SessionParts } from './session-wiring.js';
import { WaitingRuns } from './waiting-runs.js';

/** What a session's resume, per-call approvals and waiting runs call back on it. */
export interface ExtrasHost {
  busy(): boolean;
  closed(): boolean;
  fenced(): boolean;
  execute(request: ExecutionRequest): Promise<ExecutionResult>;
  run(request: RunRequest): RunHandle;
  assertOpen(): void;
  newId(): string;
}

/** A session's resume by default (auto-resume.ts), per-call approvals and the runs of its waiting inputs. */
export interface SessionExtras {
  resuming: AutoResume;
  approvals: PerCallApprovals;
  waiting: WaitingRuns;
}

export function sessionExtras(d: SessionDeps, parts: SessionParts, h: ExtrasHost): SessionExtras {
  const openRun = () => parts.runs.open;
  const waitForIdle = () => waiting.whenIdle();
  const resuming = new AutoResume(d.resume ?? 'auto', {
    openRun,
    recovery: d.recovery,
    continueRun: (runId, attemptId) => h.execute({ kind: 'continue', runId, attemptId }),
    waitForIdle,
    newId: () => h.newId(),
    busy: () => h.busy(),
    assertOpen: () => h.assertOpen(),
  });
  const approvals = new PerCallApprovals({
    sessionId: d.sessionId,
    store: d.store,
    writer: d.env.writer,
    openRun,
    assertOpen: () => h.assertOpen(),
    respond: (runId, questionId, answer) => h.run({ kind: 'respond', runId, questionId, answer }),
  });
  const waiting: WaitingRuns = new WaitingRuns({
    ...parts,
    resuming,
    inputs: d.inputs,
    busy: () => h.busy(),
    closed: () => h.closed(),
    held: () => d.isKilled() || h.fenced() || d.options.model === undefined,
    start: (run) => parts.actor.send({ type: 'START', run }),
  });
  return { resuming, approvals, waiting };
}
