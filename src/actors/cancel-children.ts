import { promiseActor } from './promise-actor.js';
import type { CancelChildrenInput, ChildOfCall } from './run-children.js';
import { servicesIn, type ServicesSource } from './session-services.js';

/**
 * The `cancelChildren` actor of the run machine: a run that ends cancelled first cancels the open
 * runs of its agent calls' children (docs/agents.md, "Control"), before its run/end is committed.
 * @example
 * runMachine.provide({ actors: { cancelChildren: cancelChildrenActor(services) } })
 */
export const cancelChildrenActor = (env: ServicesSource) =>
  promiseActor<ChildOfCall[], CancelChildrenInput>(({ input, system, signal }) => {
    const s = servicesIn(env, system);
    return s.children ? s.children.cancelOpen({ sessionId: s.sessionId, writer: s.writer }, input, signal) : Promise.resolve([]);
  });
