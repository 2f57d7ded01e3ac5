import { z } from 'zod';
import { EventRecord } from '../contracts/events.js';
import type { EventStore } from '../persistence/event-store.js';
import { childSessionId } from '../runtime/agent-calls.js';
import { readAll } from './data.js';
import { buildTimeline, type TimelineModel } from './timeline-model.js';

/** The child session of one agentTool call, with its own children (docs/agents.md), for `renderTimeline`. */
export interface ChildTimeline {
  /** The parent's call the child answers. */
  callId: string;
  sessionId: string;
  events: EventRecord[];
  children?: ChildTimeline[];
}

export const ChildTimelineSchema: z.ZodType<ChildTimeline> = z.lazy(() =>
  z.strictObject({
    callId: z.string().min(1),
    sessionId: z.string().min(1),
    events: z.array(EventRecord),
    children: z.array(ChildTimelineSchema).optional(),
  }),
);

/** How deep `actorloop view` reads a tree of agents (a deeper child is listed by its parent's call only). */
const MAX_DEPTH = 8;

/**
 * The child sessions of a session's agentTool calls (a `tool/call` recorded `resumable`), read
 * from `store` with their own children, in call order; a call whose child session has no log
 * (it never opened) has none.
 */
export async function readChildTimelines(
  store: EventStore,
  sessionId: string,
  events: readonly EventRecord[],
  depth = 1,
): Promise<ChildTimeline[]> {
  if (depth > MAX_DEPTH) return [];
  const out: ChildTimeline[] = [];
  const seen = new Set<string>();
  for (const e of events) {
    if (e.type !== 'tool/call' || e.payload.resumable !== true || e.payload.copiedFrom !== undefined) continue;
    const childId = childSessionId({ sessionId, idempotencyKey: String(e.payload.idempotencyKey) });
    if (seen.has(childId) || !(await store.getHead(childId))) continue;
    seen.add(childId);
    const childEvents = await readAll(store, childId);
    const children = await readChildTimelines(store, childId, childEvents, depth + 1);
    out.push({ callId: String(e.payload.callId), sessionId: childId, events: childEvents, ...(children.length ? { children } : {}) });
  }
  return out;
}

/** One child session as the page draws it: its rows under the parent's, its status and answer. */
export interface ChildLanes {
  /** 1 for a child of the page's session, 2 for a grandchild… */
  depth: number;
  callId: string;
  sessionId: string;
  model: TimelineModel;
  /** Its latest run's status (`running` without a run/end). */
  status: string;
  /** Its latest final answer, if any. */
  answer?: string;
}

/** The children, depth first (each followed by its own), as lanes. */
export function childLanes(children: readonly ChildTimeline[], depth = 1): ChildLanes[] {
  return children.flatMap((c) => {
    let status = 'not started';
    let answer: string | undefined;
    for (const e of c.events) {
      if (e.type === 'run/start') status = 'running';
      if (e.type === 'run/end') status = String(e.payload.status);
      if (e.type === 'final/message' && e.payload.copiedFrom === undefined) answer = String(e.payload.content);
    }
    const lanes: ChildLanes = {
      depth,
      callId: c.callId,
      sessionId: c.sessionId,
      model: buildTimeline(c.sessionId, c.events),
      status,
      ...(answer !== undefined ? { answer } : {}),
    };
    return [lanes, ...childLanes(c.children ?? [], depth + 1)];
  });
}
