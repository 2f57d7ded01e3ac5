/**
 * The states each machine actor passed through, collected from XState inspection events (the
 * runtime's `inspect` option): one trace per actor, in the order the actors started, each state
 * value recorded once per visit (consecutive repeats dropped). Actors without states (a run's
 * effects, one actor per phase such as callModel or commitIntent; its tool calls) are counted by their `src`.
 *
 * @example
 * const trace = stateTrace();
 * const runtime = createRuntime({ ..., inspect: trace.inspect });
 * // … run something …
 * for (const line of trace.lines()) console.log(line); // session: idle → preparing → executing → finalizing → idle → …
 */
import type { InspectionEvent } from 'xstate';

/** What an inspection event's `actorRef` carries at run time (its type names only `sessionId`). */
interface InspectedActor {
  sessionId: string;
  id?: string;
  src?: unknown;
  logic?: { config?: { id?: unknown } };
  /** The actor it runs under (an agentTool's child session: the parent's tool-call actor). */
  _parent?: InspectedActor;
}

export interface ActorTrace {
  /** The actor's id in its system (`x:0`, …): unique per actor. */
  sessionId: string;
  /** The actor's id under its parent (`run`, `toolBatch`, a call id). */
  id: string;
  /** The machine id (`session`, `run`, `toolBatch`), or the `src` of an actor without states. */
  machine: string;
  /** Whether the actor is a state machine (it has state values). */
  isMachine: boolean;
  /** The state values it passed through, nested values as `a.b`, without consecutive repeats. */
  states: string[];
  /** The sessionId of the actor it runs under, if any. */
  parent?: string;
  /** A session machine's session id (its context's). */
  session?: string;
}

/** A state value as one string: `idle`, `running.parallel`, `(light.on, fan.off)` for parallel regions. */
export function stateName(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value === null || typeof value !== 'object') return String(value);
  const entries = Object.entries(value as Record<string, unknown>).map(([k, v]) => {
    const inner = stateName(v);
    return inner === '' ? k : `${k}.${inner}`;
  });
  return entries.length === 1 ? entries[0]! : `(${entries.join(', ')})`;
}

function describeActor(ref: InspectedActor): { machine: string; isMachine: boolean } {
  const machineId = ref.logic?.config?.id;
  if (typeof machineId === 'string') return { machine: machineId, isMachine: true };
  return { machine: typeof ref.src === 'string' ? ref.src : (ref.id ?? ref.sessionId), isMachine: false };
}

/** A state-sequence collector: pass `inspect` to the runtime, read `traces()` or `lines()` after. */
export function stateTrace() {
  const traces = new Map<string, ActorTrace>();
  const traceOf = (ref: InspectedActor): ActorTrace => {
    let t = traces.get(ref.sessionId);
    if (!t) {
      t = {
        sessionId: ref.sessionId,
        id: ref.id ?? ref.sessionId,
        ...describeActor(ref),
        states: [],
        ...(ref._parent ? { parent: ref._parent.sessionId } : {}),
      };
      traces.set(ref.sessionId, t);
    }
    return t;
  };
  const inspect = (e: InspectionEvent): void => {
    if (e.type === '@xstate.actor') traceOf(e.actorRef as InspectedActor);
    if (e.type !== '@xstate.snapshot') return;
    const t = traceOf(e.actorRef as InspectedActor);
    const { value, context } = e.snapshot as { value?: unknown; context?: { sessionId?: unknown } };
    if (t.machine === 'session' && t.session === undefined && typeof context?.sessionId === 'string') t.session = context.sessionId;
    if (!t.isMachine || value === undefined) return;
    const state = stateName(value);
    if (t.states.at(-1) !== state) t.states.push(state);
  };
  const list = () => [...traces.values()];
  return {
    inspect,
    /** Every actor seen, in start order. */
    traces: list,
    /** The traces of one machine, in start order. */
    of: (machine: string) => list().filter((t) => t.machine === machine),
    /**
     * One line per machine actor (`run #2: starting → …` when a machine ran more than once), then
     * one per kind of actor without states (`toolCall: 3 actors (c1, c2, c3)`).
     */
    lines(): string[] {
      const all = list();
      const machines = all.filter((t) => t.isMachine);
      const count = new Map<string, number>();
      for (const t of machines) count.set(t.machine, (count.get(t.machine) ?? 0) + 1);
      const nth = new Map<string, number>();
      const out = machines.map((t) => {
        const n = (nth.get(t.machine) ?? 0) + 1;
        nth.set(t.machine, n);
        return `${count.get(t.machine)! > 1 ? `${t.machine} #${n}` : t.machine}: ${t.states.join(' → ')}`;
      });
      const others = new Map<string, string[]>();
      for (const t of all) if (!t.isMachine) others.set(t.machine, [...(others.get(t.machine) ?? []), t.id]);
      for (const [src, ids] of others) {
        const named = ids.filter((id) => id !== src);
        out.push(
          `${src}: ${ids.length} actor${ids.length === 1 ? '' : 's'} without states${named.length > 0 ? ` (${named.join(', ')})` : ''}`,
        );
      }
      return out;
    },
    /**
     * The machine actors as a tree, one line each, indented under the actor each runs under: a
     * session with its session id and states, a machine with its states, and an actor without
     * states that others run under (an agentTool's tool-call actor, whose child session runs
     * under it) with its id.
     */
    tree(): string[] {
      const all = list();
      const known = new Set(all.map((t) => t.sessionId));
      const kids = new Map<string | undefined, ActorTrace[]>();
      for (const t of all) {
        const at = t.parent !== undefined && known.has(t.parent) ? t.parent : undefined;
        kids.set(at, [...(kids.get(at) ?? []), t]);
      }
      const shown = (t: ActorTrace): boolean => t.isMachine || (kids.get(t.sessionId) ?? []).some(shown);
      const out: string[] = [];
      const walk = (parent: string | undefined, depth: number) => {
        for (const t of (kids.get(parent) ?? []).filter(shown)) {
          const what = t.isMachine ? `${t.machine}${t.session ? ` ${t.session}` : ''}: ${t.states.join(' → ')}` : `${t.machine} ${t.id}`;
          out.push(`${'  '.repeat(depth)}${what}`);
          walk(t.sessionId, depth + 1);
        }
      };
      walk(undefined, 0);
      return out;
    },
  };
}
