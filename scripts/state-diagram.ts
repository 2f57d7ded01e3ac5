/**
 * A Mermaid `stateDiagram-v2` of an XState v5 machine, read from its definition (`machine.root`):
 * states (compound ones as composite states, parallel regions separated by `--`), initial and
 * final states, every transition with its event and guard (`event [guard]`), eventless (`always`)
 * and delayed (`after`) transitions, invoked actors (`done: <src>` / `error: <src>` for their
 * `onDone` / `onError`), and what the root itself does, as a note. Written against the StateNode
 * API only, so it renders whatever the machines become. Deterministic: the same definition gives
 * the same text.
 *
 * Not part of the published API (scripts/ is not in the package); `npm run diagrams` uses it.
 */
import type { AnyStateMachine, AnyStateNode } from 'xstate';

type Transition = AnyStateNode['always'] extends (infer T)[] | undefined ? T : never;

/** A guard as XState keeps it: a name, `{ type, params }`, or a function (inline or higher-order). */
type GuardLike = string | { type: string } | ((...args: never[]) => unknown) | undefined;

/** The guard as written in the machine: `name`, `and(a, not(b))`, `stateIn(x)`, or `inline`. */
export function guardLabel(guard: GuardLike): string | undefined {
  if (guard === undefined) return undefined;
  if (typeof guard === 'string') return guard;
  if (typeof guard === 'object') return guard.type;
  const fn = guard as { name?: string; check?: unknown; guards?: GuardLike[]; stateValue?: unknown };
  if (fn.check !== undefined && Array.isArray(fn.guards)) return `${fn.name}(${fn.guards.map((g) => guardLabel(g) ?? '?').join(', ')})`;
  if (fn.check !== undefined && fn.stateValue !== undefined) {
    const v = typeof fn.stateValue === 'string' ? fn.stateValue : JSON.stringify(fn.stateValue);
    return `stateIn(${v})`;
  }
  return 'inline';
}

/** Mermaid's state-diagram text stops at `#` and `;` (comments, statement ends). */
const clean = (text: string) => text.replace(/[#;]/g, '').replace(/\s+/g, ' ').trim();

/**
 * The source of an invoked actor: its `src` name; for logic given in place, the machine id of an
 * inline machine, else the invoke's own id when it was given one, else `inline`.
 */
function invokeSrc(node: AnyStateNode, inv: AnyStateNode['invoke'][number]): string {
  const src = typeof inv.src === 'string' ? inv.src : undefined;
  if (src !== undefined && !src.startsWith('xstate.invoke.')) return src;
  // the definition names such logic `xstate.invoke.<id>`; the state's config still holds the logic
  const configs = ([] as unknown[]).concat(node.config.invoke ?? []) as { src?: unknown }[];
  const logic = configs[node.invoke.indexOf(inv)]?.src as { config?: { id?: unknown } } | undefined;
  if (typeof logic?.config?.id === 'string') return logic.config.id;
  return /^\d+\./.test(inv.id) ? 'inline' : inv.id;
}

/** Invokes visible from `node` (its own and its ancestors'), by invoke id. */
function invokesAround(node: AnyStateNode): Map<string, string> {
  const out = new Map<string, string>();
  for (let n: AnyStateNode | undefined = node; n; n = n.parent)
    for (const inv of n.invoke) if (!out.has(inv.id)) out.set(inv.id, invokeSrc(n, inv));
  return out;
}

/** An event type as a reader says it: `done: <src>`, `error: <src>`, `after 100ms`, `done`. */
export function eventLabel(node: AnyStateNode, eventType: string): string {
  const actor = /^xstate\.(done|error)\.actor\.(.+)$/.exec(eventType);
  if (actor) return `${actor[1]}: ${invokesAround(node).get(actor[2]!) ?? actor[2]}`;
  if (eventType.startsWith('xstate.done.state.')) return 'done';
  const delayed = node.after.find((t) => t.eventType === eventType);
  if (delayed) return `after ${typeof delayed.delay === 'number' ? `${delayed.delay}ms` : String(delayed.delay)}`;
  return eventType;
}

/** The guard of each transition of one event; an unguarded one after guarded ones is `else`. */
function guardsOf(list: readonly Transition[]): (string | undefined)[] {
  return list.map((t, i) => guardLabel(t.guard as GuardLike) ?? (i > 0 && list[i - 1]!.guard !== undefined ? 'else' : undefined));
}

/** `event`, or `event [g1 | g2]` when guarded (the guards of the transitions it merges, in order). */
function label(event: string, guards: (string | undefined)[]): string {
  const named = [...new Set(guards.filter((g): g is string => g !== undefined))];
  return clean(named.length === 0 ? event : `${event} [${named.join(' | ')}]`);
}

interface Edge {
  from: AnyStateNode;
  to: AnyStateNode;
  label: string;
}

/**
 * Every transition leaving `node`, in definition order: targeted ones as edges, targetless ones
 * as labels. Transitions of one event between the same two states are one edge naming each guard.
 */
function transitionsOf(node: AnyStateNode): { edges: Edge[]; stays: string[] } {
  const edges: { to: AnyStateNode; event: string; guards: (string | undefined)[] }[] = [];
  const stays: { event: string; guards: (string | undefined)[] }[] = [];
  const add = (list: readonly Transition[], event: string) => {
    const guards = guardsOf(list);
    list.forEach((t, i) => {
      if (!t.target || t.target.length === 0) {
        const same = stays.find((s) => s.event === event);
        if (same) same.guards.push(guards[i]);
        else stays.push({ event, guards: [guards[i]] });
        return;
      }
      for (const to of t.target) {
        const same = edges.find((e) => e.to === to && e.event === event);
        if (same) same.guards.push(guards[i]);
        else edges.push({ to, event, guards: [guards[i]] });
      }
    });
  };
  for (const [eventType, list] of node.transitions) add(list, eventLabel(node, eventType));
  if (node.always?.length) add(node.always, 'always');
  return {
    edges: edges.map((e) => ({ from: node, to: e.to, label: label(e.event, e.guards) })),
    stays: stays.map((s) => label(s.event, s.guards)),
  };
}

/** Every state node below `root`, depth first, in definition order. */
function descendants(root: AnyStateNode): AnyStateNode[] {
  const out: AnyStateNode[] = [];
  const visit = (n: AnyStateNode) => {
    for (const child of Object.values(n.states)) {
      out.push(child);
      visit(child);
    }
  };
  visit(root);
  return out;
}

const sanitize = (s: string) => s.replace(/[^A-Za-z0-9_]/g, '_');

/** Mermaid ids: a state's key where it is unique in the machine, else its path joined with `_`. */
function mermaidIds(root: AnyStateNode): Map<AnyStateNode, string> {
  const nodes = descendants(root);
  const count = new Map<string, number>();
  for (const n of nodes) count.set(n.key, (count.get(n.key) ?? 0) + 1);
  return new Map(nodes.map((n) => [n, sanitize(count.get(n.key) === 1 ? n.key : n.path.join('_'))]));
}

/** The innermost state (or the root) that contains both nodes: where Mermaid wants their edge. */
function commonParent(a: AnyStateNode, b: AnyStateNode): AnyStateNode {
  const above = (n: AnyStateNode) => {
    const out: AnyStateNode[] = [];
    for (let p = n.parent; p; p = p.parent) out.push(p);
    return out;
  };
  const ofB = new Set(above(b));
  return above(a).find((p) => ofB.has(p)) ?? a.machine.root;
}

/**
 * The Mermaid `stateDiagram-v2` text of `machine`, one statement a line, ending with a newline.
 * @example
 * machineDiagram(createMachine({ id: 'light', initial: 'green', states: { green: { on: { NEXT: 'red' } }, red: {} } }))
 * // stateDiagram-v2\n  [*] --> green\n  green --> red : NEXT\n
 */
export function machineDiagram(machine: AnyStateMachine): string {
  const root = machine.root as AnyStateNode;
  const ids = mermaidIds(root);
  const idOf = (n: AnyStateNode) => ids.get(n)!;
  const edgesAt = new Map<AnyStateNode, Edge[]>();
  const stays = new Map<AnyStateNode, string[]>();
  const rootEdges: Edge[] = [];
  for (const n of [root, ...descendants(root)]) {
    const t = transitionsOf(n);
    stays.set(n, t.stays);
    for (const e of t.edges) {
      if (n === root) rootEdges.push(e);
      else {
        const at = commonParent(e.from, e.to);
        edgesAt.set(at, [...(edgesAt.get(at) ?? []), e]);
      }
    }
  }

  const lines = ['stateDiagram-v2'];
  const block = (node: AnyStateNode, depth: number) => {
    const pad = '  '.repeat(depth);
    const children = Object.values(node.states) as AnyStateNode[];
    if (node.type === 'parallel') {
      children.forEach((region, i) => {
        if (i > 0) lines.push(`${pad}--`);
        state(region, depth);
      });
    } else {
      const initial = node.initial?.target ?? [];
      for (const t of initial) lines.push(`${pad}[*] --> ${idOf(t)}`);
      for (const child of children) state(child, depth);
    }
    for (const e of edgesAt.get(node) ?? []) lines.push(`${pad}${idOf(e.from)} --> ${idOf(e.to)} : ${e.label}`);
    for (const child of children) if (child.type === 'final') lines.push(`${pad}${idOf(child)} --> [*]`);
  };
  const state = (node: AnyStateNode, depth: number) => {
    const pad = '  '.repeat(depth);
    const id = idOf(node);
    const composite = node.type === 'compound' || node.type === 'parallel';
    const head = id === node.key ? `state ${id}` : `state "${clean(node.key)}" as ${id}`;
    if (composite) {
      lines.push(`${pad}${head} {`);
      block(node, depth + 1);
      lines.push(`${pad}}`);
    } else if (id !== node.key) lines.push(`${pad}${head}`);
    const about = describe(node);
    // a composite's description line would replace its title: what it does goes in a note
    if (composite && about.length > 0) lines.push(`${pad}note right of ${id}`, ...about.map((d) => `${pad}  ${d}`), `${pad}end note`);
    else for (const d of about) lines.push(`${pad}${id} : ${d}`);
  };
  const describe = (node: AnyStateNode): string[] => {
    const out: string[] = [];
    if (node.description) out.push(clean(node.description));
    if (node.type === 'history') out.push(`history (${node.history === 'deep' ? 'deep' : 'shallow'})`);
    for (const inv of node.invoke) out.push(`invokes ${clean(invokeSrc(node, inv))}`);
    const s = stays.get(node) ?? [];
    if (s.length > 0) out.push(`stays on ${s.join(', ')}`);
    return out;
  };

  block(root, 1);
  const note = [
    ...(root.description ? [clean(root.description)] : []),
    ...root.invoke.map((inv) => `invokes ${clean(invokeSrc(root, inv))}`),
    ...rootEdges.map((e) => `${e.label} → ${idOf(e.to)}`),
    ...((stays.get(root) ?? []).length > 0 ? [`stays on ${stays.get(root)!.join(', ')}`] : []),
  ];
  const first = (Object.values(root.states) as AnyStateNode[])[0];
  if (note.length > 0 && first)
    lines.push(`  note left of ${idOf(first)}`, `    in every state of ${clean(root.id)}:`, ...note.map((l) => `    ${l}`), '  end note');
  return `${lines.join('\n')}\n`;
}
