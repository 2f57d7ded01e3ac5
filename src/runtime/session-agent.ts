import type { OutputSpec } from '../actors/final-output.js';
import type { AgentSeat, OfferedTools } from '../actors/session-services.js';
import type { LoopBudget } from '../contracts/config.js';
import type { ModelProvider } from '../contracts/model.js';
import type { AgentProfile, AgentRegistry } from './agent-registry.js';
import type { ResolvedRuntimeOptions } from './options.js';
import type { ToolSet } from './tool-set.js';

/** What a child session records of its parent call (session/attached, run/start). */
export interface ParentLink {
  sessionId: string;
  runId: string;
  callId: string;
  /** The seq of the parent's tool/call record. */
  seq?: number;
}

/**
 * The agent one session runs (docs/agents.md). Its services' model, prefix and approvals are
 * read from it (getters: a handoff switches them for the next model call); an attempt's tools,
 * output schema and budget come from the agent it starts with, and a handoff gives the running
 * attempt the target's tools (and output schema) through the run machine.
 */
export class SessionAgent implements AgentSeat {
  private current: AgentProfile;
  private readonly models = new Map<string, ModelProvider>();

  constructor(
    private readonly registry: AgentRegistry,
    name: string,
    private readonly traceModel: (m: ModelProvider) => ModelProvider = (m) => m,
    /** A child session's parent call (recorded in its run/start). */
    readonly parent?: ParentLink,
  ) {
    this.current = registry.get(name)!;
  }

  get name(): string {
    return this.current.name;
  }

  get profile(): AgentProfile {
    return this.current;
  }

  /** The model of the current agent (traced once per agent). */
  get model(): ModelProvider {
    let m = this.models.get(this.current.name);
    if (!m) this.models.set(this.current.name, (m = this.traceModel(this.current.model)));
    return m;
  }

  /** The tools of an attempt of the current agent starting now. */
  readonly toolSet = (): ToolSet => this.current.toolSet();

  /** The output schema of a run the current agent starts (none given to the run itself). */
  get output(): OutputSpec | undefined {
    return this.current.outputSpec;
  }

  /** The runtime options with the current agent's output, budget, approvals and system prompt (read when an attempt is made). */
  options(o: ResolvedRuntimeOptions): ResolvedRuntimeOptions {
    const view = { ...o } as ResolvedRuntimeOptions;
    Object.defineProperties(view, {
      output: { get: () => this.current.output, enumerable: true },
      budget: { get: () => this.current.budget, enumerable: true },
      approvalFor: { get: () => this.current.approvalFor, enumerable: true },
      systemPrompt: { get: () => this.current.systemPrompt, enumerable: true },
    });
    return view;
  }

  /**
   * The budget of a run that started with agent `name` (the current agent's when it is not
   * known): a run keeps the budget it started with through a handoff, in every attempt.
   */
  budgetOfRun(name: string | undefined): LoopBudget {
    return (name !== undefined ? this.registry.get(name)?.budget : undefined) ?? this.current.budget;
  }

  handoffTarget(toolName: string): string | undefined {
    return this.current.handoffs.get(toolName);
  }

  handoff(to: string): { offered: OfferedTools; output?: OutputSpec } {
    const next = this.registry.get(to);
    if (!next) throw new Error(`no agent named ${to}`);
    this.current = next;
    const set = next.toolSet();
    return {
      offered: { tools: set.tools, specs: set.specs, catalogDigest: set.catalogDigest },
      ...(next.outputSpec ? { output: next.outputSpec } : {}),
    };
  }
}
