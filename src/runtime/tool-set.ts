import type { OfferedTools } from '../actors/session-services.js';
import type { ToolSpec } from '../contracts/tools.js';
import { canonicalJson } from '../persistence/codec.js';
import { sha256 } from '../persistence/surface.js';
import type { AnyTool, ToolList } from '../tools/define-tool.js';
import { askUserTool } from '../tools/ask-user.js';
import type { ResolvedRuntimeOptions } from './options.js';

/** The tools one attempt is offered, and what its execution profile records of them. */
export interface ToolSet extends OfferedTools {
  /** sha256 hex of the canonical execution profile: this catalog, then the tools' revisions now. */
  readonly fingerprint: string;
}

/**
 * The tools an attempt starting now is offered: the tools passed in, in order, where the tools
 * of a live list (an MCP server's) stand for the list, whose tools now take the place of the
 * first of them. A name is offered once: a tool passed on its own keeps its name, and a list's
 * tool whose name is taken already is left out.
 */
export function offeredTools(given: readonly AnyTool[]): AnyTool[] {
  const taken = new Set(given.filter((t) => !t.list).map((t) => t.name));
  const lists = new Set<ToolList>();
  const offered: AnyTool[] = [];
  for (const t of given) {
    if (!t.list) {
      offered.push(t);
      continue;
    }
    if (lists.has(t.list)) continue;
    lists.add(t.list);
    for (const listed of t.list.tools()) {
      if (taken.has(listed.name)) continue;
      taken.add(listed.name);
      offered.push(listed);
    }
  }
  return offered;
}

/**
 * The tool set of an attempt starting now, for a runtime's tools and the rest of its execution
 * profile (model id, prompts, config, budget): built again only when a live list has changed
 * (its `tools()` returns another array); the revisions are read on every call.
 */
export function toolSets(given: readonly AnyTool[], profile: Record<string, unknown>): () => ToolSet {
  const lists = [...new Set(given.flatMap((t) => (t.list ? [t.list] : [])))];
  let read: (readonly AnyTool[])[] = [];
  let built: { tools: Map<string, AnyTool>; specs: ToolSpec[]; catalogDigest: string; base: string; revisioned: AnyTool[] } | undefined;
  return () => {
    const now = lists.map((l) => l.tools());
    if (!built || now.some((tools, i) => tools !== read[i])) {
      read = now;
      const tools = offeredTools(given);
      const catalog = tools.map((t) => ({ ...t.spec, mode: t.mode, resources: Array.isArray(t.resources) ? t.resources : 'dynamic' }));
      built = {
        tools: new Map(tools.map((t) => [t.name, t])),
        specs: tools.map((t) => t.spec),
        catalogDigest: sha256(canonicalJson(catalog)),
        base: sha256(canonicalJson({ ...profile, tools: catalog })),
        // tools whose provider can change what it offers (an MCP server's list): their revisions now
        revisioned: tools.filter((t) => typeof t.revision === 'function'),
      };
    }
    const { tools, specs, catalogDigest, base, revisioned } = built;
    const fingerprint =
      revisioned.length === 0 ? base : sha256(canonicalJson({ profile: base, revisions: revisioned.map((t) => [t.name, t.revision!()]) }));
    return { tools, specs, catalogDigest, fingerprint };
  };
}

/**
 * The tool sets of `o`'s attempts: its tools (with the askUser built-in when asked for) and the
 * rest of its execution profile (model id, prompts, config, budget).
 */
export function runtimeToolSet(o: ResolvedRuntimeOptions): () => ToolSet {
  return toolSets(o.askUser ? [...o.tools, askUserTool] : o.tools, {
    modelId: o.model.modelId,
    systemPrompt: o.systemPrompt ?? null,
    bootstrapMessages: o.bootstrapMessages,
    config: o.config,
    budget: o.budget,
  });
}
