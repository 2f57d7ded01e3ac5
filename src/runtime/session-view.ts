import { createStore } from '@xstate/store';
import type { Observable } from 'rxjs';
import type { ExecutionResult } from '../contracts/requests.js';
import type { Message } from '../contracts/message.js';
import type { PendingRequest } from '../contracts/events.js';
import type { RunContext } from '../machines/run-context.js';
import type { Counted, Reservation } from '../contracts/reservation.js';
import type { SessionServices } from '../actors/session-services.js';
import { spendingOf, type Spending } from '../contracts/spending.js';
import { awaitedRequest } from '../persistence/open-run.js';

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
  /**
   * Spent, reserved (a call in flight's reservation included) and remaining per usage budget of the
   * run under way, else of the last result (docs/guarantees.md, "Budgets").
   */
  spending?: Spending;
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

/** What a snapshot is made from. */
export interface SnapshotSource {
  sessionId: string;
  /** The session machine's state value, and its run child's state and figures if one runs. */
  sessionState: string;
  run:
    | {
        value: unknown;
        context: Pick<RunContext, 'step' | 'toolCalls' | 'cost' | 'recoveries' | 'budget' | 'usage' | 'counted' | 'overruns'>;
      }
    | undefined;
  /** The reservation of the model call in flight, if any. */
  inFlight?: Reservation | undefined;
  /** What the running batch's sub-agents spent and hold (not yet in the run's figures), if any. */
  children?: Counted | undefined;
  lastResult: ExecutionResult | undefined;
  /** The open run the session waits on (none while an attempt runs). */
  waiting: { pending?: { pendingRequest: PendingRequest }; cancelRequested?: { reason: string } } | undefined;
  messages: readonly Message[];
  tokens: number;
}

/** What a run holds now beside its figures: its call in flight, or while its tool batch runs, its sub-agents' spending. */
function heldNow(phase: string, s: SnapshotSource): { outputTokens: number; cost?: string } | undefined {
  if (phase === 'runningTools' && s.children) return s.children;
  return s.inFlight;
}

/** What a session's services hold for its snapshot: the call in flight, its batch's sub-agents' spending. */
export const heldBy = (env: Pick<SessionServices, 'inFlight' | 'budgets'>): Pick<SnapshotSource, 'inFlight' | 'children'> => ({
  inFlight: env.inFlight?.reservation,
  children: env.budgets?.childrenUsing(),
});

/** `session.snapshot()`: JSON state for UIs and debugging. */
export function snapshotOf(s: SnapshotSource): SessionSnapshot {
  const { run, lastResult: r, waiting } = s;
  const asked = waiting ? awaitedRequest(waiting) : undefined;
  const status: SessionStatus = asked ? 'suspended' : waiting ? 'detached' : (s.sessionState as SessionStatus);
  return {
    sessionId: s.sessionId,
    status,
    phase: run ? String(run.value) : status,
    messages: [...s.messages],
    step: run?.context.step ?? r?.steps ?? 0,
    toolCalls: run?.context.toolCalls ?? r?.toolCalls ?? 0,
    tokens: s.tokens,
    cost: run?.context.cost ?? r?.cost ?? '0',
    recoveries: run?.context.recoveries ?? r?.recoveries ?? 0,
    ...(r ? { usage: r.usage } : {}),
    ...(run
      ? spendingOf(
          run.context.budget,
          { outputTokens: run.context.usage.outputTokens, cost: run.context.cost },
          run.context.counted,
          run.context.overruns,
          heldNow(String(run.value), s),
        )
      : r?.spending
        ? { spending: r.spending }
        : {}),
    ...(asked ? { pending: asked } : {}),
    ...(r?.error ? { lastError: { kind: r.error.kind, message: r.error.message } } : {}),
  };
}

/** The session's `view`: made on first use, then kept current from the session's envelopes. */
export class LiveView {
  private made?: ReturnType<typeof makeView>;

  constructor(
    private readonly snapshot: () => SessionSnapshot,
    private readonly events$: () => Observable<unknown>,
  ) {}

  get store(): ReturnType<typeof makeView> {
    if (!this.made) {
      this.made = makeView(this.snapshot());
      this.events$().subscribe(() => this.refresh());
    }
    return this.made;
  }

  refresh(): void {
    this.made?.trigger.sync({ snapshot: this.snapshot() });
  }
}
