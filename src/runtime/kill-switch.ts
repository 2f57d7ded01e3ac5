import { isObservable, type Observable } from 'rxjs';
import type { ExecutionSession } from './execution-session.js';

/** A runtime's kill switch as its sessions see it: whether it is set now. */
export interface KillSwitch {
  /** Whether the switch is set: no new attempt starts. */
  readonly killed: boolean;
  /** Stops following the switch (a shared signal keeps no closed runtime alive). */
  unsubscribe(): void;
}

/**
 * Follows `option` (an AbortSignal: set once aborted; an Observable: set while its last value is
 * truthy, cleared on a falsy one). Setting it cancels every open session's run; clearing it
 * starts the inputs held back while it was set.
 */
export function followKillSwitch(option: AbortSignal | Observable<unknown> | undefined, sessions: Iterable<ExecutionSession>): KillSwitch {
  let killed = false;
  let unsubscribe = () => {};
  const kill = (on: boolean) => {
    killed = on;
    if (on) for (const s of sessions) void s.requestCancel('kill switch');
    else for (const s of sessions) s.resumeWaitingInputs(); // inputs held back while it was set
  };
  if (option instanceof AbortSignal) {
    if (option.aborted) killed = true;
    else {
      const onKill = () => kill(true);
      option.addEventListener('abort', onKill, { once: true });
      unsubscribe = () => option.removeEventListener('abort', onKill);
    }
  } else if (isObservable(option)) {
    const sub = option.subscribe({ next: (v) => kill(Boolean(v)) }); // truthy = set, falsy = cleared
    unsubscribe = () => sub.unsubscribe();
  }
  return {
    get killed() {
      return killed;
    },
    unsubscribe: () => unsubscribe(),
  };
}
