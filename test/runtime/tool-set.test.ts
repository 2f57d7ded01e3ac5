import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, type AnyTool, type ToolList } from '../../src/index.js';
import { canonicalJson } from '../../src/persistence/codec.js';
import { sha256 } from '../../src/persistence/surface.js';
import { offeredTools, toolSets } from '../../src/runtime/tool-set.js';

const tool = (name: string): AnyTool => defineTool({ name, description: name, parameters: z.object({}), execute: () => name });

/** A live list whose tools are whatever `now` holds (a new array when it changes). */
function liveList(names: string[]): { list: ToolList; set(names: string[]): void } {
  let now: AnyTool[] = [];
  const list: ToolList = { tools: () => now };
  const set = (ns: string[]) => {
    now = ns.map((n) => ({ ...tool(n), list, revision: () => ns.join(',') }));
  };
  set(names);
  return { list, set };
}

const names = (tools: readonly AnyTool[]) => tools.map((t) => t.name);

describe('the tools an attempt is offered', () => {
  it("a live list's tools now take the place of its tools that were passed, once, where the first of them stood", () => {
    const server = liveList(['search', 'fetch']);
    const [search, fetch] = server.list.tools();
    server.set(['search', 'fetch', 'extra']);
    expect(names(offeredTools([tool('a'), search!, tool('b'), fetch!]))).toEqual(['a', 'search', 'fetch', 'extra', 'b']);
    server.set(['fetch']);
    expect(names(offeredTools([tool('a'), search!, tool('b'), fetch!]))).toEqual(['a', 'fetch', 'b']);
  });

  it('a name is offered once: a tool passed on its own keeps it, then the earlier list', () => {
    const one = liveList(['x']);
    const two = liveList(['y']);
    const [x] = one.list.tools();
    const [y] = two.list.tools();
    one.set(['x', 'mine', 'shared']);
    two.set(['y', 'shared']);
    const offered = offeredTools([x!, y!, tool('mine')]);
    expect(names(offered)).toEqual(['x', 'shared', 'y', 'mine']);
    expect(offered[3]!.list).toBeUndefined();
    expect(offered[1]!.list).toBe(one.list);
  });
});

describe('the tool set of an attempt starting now', () => {
  const profile = { modelId: 'm', systemPrompt: null, bootstrapMessages: [], config: {}, budget: {} };

  it('without live lists or revisions, the fingerprint is the canonical profile with the tool catalog', () => {
    const tools = [tool('a'), tool('b')];
    const catalog = tools.map((t) => ({ ...t.spec, mode: t.mode, resources: t.resources }));
    const set = toolSets(tools, profile)();
    expect(set.fingerprint).toBe(sha256(canonicalJson({ ...profile, tools: catalog })));
    expect(set.catalogDigest).toBe(sha256(canonicalJson(catalog)));
    expect([...set.tools.keys()]).toEqual(['a', 'b']);
  });

  it('is built again only when a list changes; its fingerprint follows the list', () => {
    const server = liveList(['search']);
    const current = toolSets([tool('a'), ...server.list.tools()], profile);
    const first = current();
    expect(current().tools).toBe(first.tools);
    expect(current().fingerprint).toBe(first.fingerprint);
    server.set(['search', 'extra']);
    const second = current();
    expect(second.tools).not.toBe(first.tools);
    expect([...second.tools.keys()]).toEqual(['a', 'search', 'extra']);
    expect(second.specs.map((s) => s.name)).toEqual(['a', 'search', 'extra']);
    expect(second.fingerprint).not.toBe(first.fingerprint);
    expect(second.catalogDigest).not.toBe(first.catalogDigest);
    server.set(['search']);
    expect(current().fingerprint).toBe(first.fingerprint);
  });
});
