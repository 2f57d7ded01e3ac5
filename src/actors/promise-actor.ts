import type { ActorSystem, AnyActorRef, EventObject, PromiseActorLogic, PromiseSnapshot } from 'xstate';

/** What a phase's promise creator is handed: as XState's `fromPromise` hands it. */
export interface PromiseActorArgs<TInput> {
  input: TInput;
  system: ActorSystem<any>;
  self: AnyActorRef;
  /** Aborted when the actor is stopped before it settles. Made on first read. */
  readonly signal: AbortSignal;
  emit: (event: EventObject) => void;
  /** Sends `event` to the actor that invoked this one (as `fromCallback`'s `sendBack`). */
  sendBack: (event: EventObject) => void;
}

const RESOLVE = 'actorloop.promise.resolve';
const REJECT = 'actorloop.promise.reject';
const STOP = 'xstate.stop';

/** The controller of each running actor whose creator read its `signal`, for the stop to abort. */
const controllers = new WeakMap<AnyActorRef, AbortController>();

/** A creator's arguments; `signal` makes the actor's controller on first read. */
class PhaseArgs<TInput> implements PromiseActorArgs<TInput> {
  private controller: AbortController | undefined;
  constructor(
    readonly input: TInput,
    readonly system: ActorSystem<any>,
    readonly self: AnyActorRef,
    readonly emit: (event: EventObject) => void,
  ) {}
  // a getter (the creators destructure it): a function bound to this actor's parent
  get sendBack(): (event: EventObject) => void {
    const parent = this.self._parent;
    return (event) => parent?.send(event);
  }
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      // read after the actor stopped: already aborted, as fromPromise's would be
      if (this.self.getSnapshot().status !== 'active') this.controller.abort();
      else controllers.set(this.self, this.controller);
    }
    return this.controller.signal;
  }
}

/**
 * Promise actor logic with XState's `fromPromise` contract (the same snapshots, `onDone` /
 * `onError`, `signal` aborted on stop), for the runtime's phase actors: the AbortController is
 * made only when the creator reads `signal`. Most phases (the commits, settling, the final
 * answer) never do, and an AbortController costs ≈ 2.5 µs to make and more to abort on Node 20;
 * a step invokes several such actors (docs/performance.md, *The XState floor*).
 */
export function promiseActor<TOutput, TInput = void>(
  creator: (args: PromiseActorArgs<TInput>) => PromiseLike<TOutput> | TOutput,
): PromiseActorLogic<TOutput, TInput> {
  return {
    config: creator,
    transition: (state, event, scope) => {
      if (state.status !== 'active') return state;
      switch (event.type) {
        case RESOLVE:
          return { status: 'done', output: event['data'] as TOutput, error: undefined, input: undefined };
        case REJECT:
          return { status: 'error', output: undefined, error: event['data'], input: undefined };
        case STOP: {
          const controller = controllers.get(scope.self);
          if (controller) {
            controllers.delete(scope.self);
            controller.abort();
          }
          return { status: 'stopped', output: undefined, error: undefined, input: undefined };
        }
        default:
          return state;
      }
    },
    start: (state, { self, system, emit }) => {
      if (state.status !== 'active') return;
      const args = new PhaseArgs<TInput>(state.input as TInput, system, self, emit as (event: EventObject) => void);
      const settle = (type: string, data: unknown) => {
        if (self.getSnapshot().status !== 'active') return;
        controllers.delete(self);
        self.send({ type, data });
      };
      // a creator that throws synchronously fails the actor's start, as with fromPromise
      Promise.resolve(creator(args)).then(
        (output) => settle(RESOLVE, output),
        (error: unknown) => settle(REJECT, error),
      );
    },
    getInitialSnapshot: (_scope, input) =>
      ({ status: 'active', output: undefined, error: undefined, input }) as PromiseSnapshot<TOutput, TInput>,
    getPersistedSnapshot: (snapshot) => snapshot,
    restoreSnapshot: (snapshot: any) => snapshot,
  } as PromiseActorLogic<TOutput, TInput>;
}
