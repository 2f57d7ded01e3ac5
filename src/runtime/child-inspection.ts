import type { AnyActorRef, InspectionEvent } from 'xstate';

/** What an inspection event's actor is at run time: its type names only `sessionId`. */
type Inspected = AnyActorRef & { _parent?: AnyActorRef };

/** The root actors of child sessions, by the root id of the tree each is shown in. */
const reportedUnder = new WeakMap<AnyActorRef, string>();

/** The root id of the inspected tree `ref` is in: its system's root's, or the tree that root is reported under. */
function treeRootOf(ref: Inspected): string {
  let root = ref;
  while (root._parent) root = root._parent as Inspected;
  return reportedUnder.get(root) ?? root.sessionId;
}

/**
 * The runtime's `inspect` for a child session (an agentTool's, docs/agents.md) running under the
 * tool-call actor `parent`: the child's session actor is an actor system of its own (its own
 * services, clock and lifecycle), so each of its inspection events is passed on with the parent
 * tree's `rootId`, and its root actor is shown as a child of `parent` — a stand-in whose
 * `_parent` is `parent` (prototype: the root itself, so its `sessionId`, `logic` and snapshot read
 * through), the same object in every event of the root, and its `xstate.init` event comes from
 * `parent`. The root's own `_parent` stays unset: a root actor with a parent would neither start
 * its system's scheduler nor stop.
 * @example
 * options.inspect = inspectUnder(runtimeInspect, callActorOf(ctx))
 */
export function inspectUnder(inspect: (e: InspectionEvent) => void, parent: AnyActorRef): (e: InspectionEvent) => void {
  const rootId = treeRootOf(parent as Inspected);
  let root: AnyActorRef | undefined;
  let shown: AnyActorRef | undefined;
  return (e) => {
    if (root === undefined) {
      // the first event of a system is its root's `@xstate.actor` (sent as the root is created)
      root = e.actorRef as AnyActorRef;
      shown = Object.create(root, { _parent: { value: parent, enumerable: false } }) as AnyActorRef;
      reportedUnder.set(root, rootId);
    }
    const actorRef = e.actorRef === root ? shown! : e.actorRef;
    if (e.type === '@xstate.event') {
      const sourceRef =
        e.sourceRef === root ? shown : (e.sourceRef ?? (e.event.type === 'xstate.init' && e.actorRef === root ? parent : undefined));
      return inspect({ ...e, rootId, actorRef, sourceRef });
    }
    inspect({ ...e, rootId, actorRef });
  };
}
