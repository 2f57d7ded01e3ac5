import { z } from 'zod';
import { LoopBudget, LoopConfig } from '../contracts/config.js';
import { Message } from '../contracts/message.js';
import type { ModelProvider } from '../contracts/model.js';
import type { EventStore } from '../persistence/event-store.js';
import type { AnyTool } from '../tools/define-tool.js';
import type { DeliveryOwner, FinalVerifier, Pricing, ToolVerifier } from './run-env.js';
import type { InspectionEvent } from 'xstate';

const fn = <T>(what: string) => z.custom<T>((v) => typeof v === 'function', `${what} must be a function`);

export const RuntimeOptions = z.object({
  store: z.custom<EventStore>((v) => typeof v === 'object' && v !== null && typeof (v as EventStore).append === 'function', 'an EventStore').optional(),
  model: z.custom<ModelProvider>((v) => typeof v === 'object' && v !== null && typeof (v as ModelProvider).call === 'function', 'a ModelProvider (e.g. openaiModel(...), scriptedModel(...))'),
  tools: z
    .array(z.custom<AnyTool>((v) => typeof v === 'object' && v !== null && 'spec' in v, 'a tool made with defineTool'))
    .default([])
    .refine((ts) => new Set(ts.map((t) => t.name)).size === ts.length, 'tool names must be unique'),
  systemPrompt: z.string().optional(),
  bootstrapMessages: z.array(Message).default([]),
  config: LoopConfig.default(LoopConfig.parse({})),
  budget: LoopBudget.default(LoopBudget.parse({})),
  pricing: fn<Pricing>('pricing').optional(),
  delivery: z
    .object({ deliver: fn<DeliveryOwner['deliver']>('delivery.deliver'), idempotent: z.boolean().optional() })
    .optional(),
  verifier: fn<ToolVerifier>('verifier').optional(),
  finalVerifier: fn<FinalVerifier>('finalVerifier').optional(),
  approvalFor: z.array(z.string()).default([]),
  askUser: z.boolean().default(false),
  killSwitch: z.unknown().optional(),
  inspect: fn<(e: InspectionEvent) => void>('inspect').optional(),
});
export type RuntimeOptions = z.input<typeof RuntimeOptions>;
export type ResolvedRuntimeOptions = z.output<typeof RuntimeOptions>;
