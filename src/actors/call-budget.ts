import type { ProviderError } from '../contracts/errors.js';
import type { Counted, Reservation } from '../contracts/reservation.js';
import type { Usage } from '../contracts/message.js';
import { priceOf } from './pricing.js';
import type { SessionServices } from './session-services.js';
import type { OutputSpec } from './final-output.js';
import type { OfferedTools } from './session-services.js';

/**
 * What a model call's budget check reads (call-model.ts): the refusal of a call the budget cannot
 * hold, which failed attempts count nothing, and the request's input estimates.
 */

/** A call the budget cannot hold: no attempt started (`owner`: the ancestor session whose budget it is, for a sub-agent's call). */
export class BudgetRefusal extends Error {
  constructor(
    readonly budget: 'maxOutputTokens' | 'maxCost',
    readonly reservation: Reservation,
    readonly owner?: string,
  ) {
    super(`the ${budget} budget${owner !== undefined ? ` of session ${owner}` : ''} cannot hold the next model call's worst case`);
    this.name = 'BudgetRefusal';
  }
}

/**
 * Provider errors that refuse the request before any output (a rate limit, bad credentials, a bad
 * or too large request, an overloaded service): nothing was generated, so the attempt counts nothing.
 * Every other failed attempt counts its reservation.
 */
const REFUSED_BEFORE_OUTPUT = new Set([
  'rate_limit',
  'rate_limit_exceeded',
  // actorloop's own: the shared rate-limit buckets could not be read (rate-limit-call.ts)
  'rate_limit_backend',
  'auth',
  'permission',
  'bad_request',
  'not_found',
  'too_large',
  'unprocessable',
  'conflict',
  'overloaded',
]);
export const countsNothing = (pe: ProviderError) => !pe.partialOutput && REFUSED_BEFORE_OUTPUT.has(pe.providerCode);

/** The token estimate of a request's tool specs (4 characters a token), once per offered set. */
const specTokens = new WeakMap<object, number>();
export function toolTokens(specs: OfferedTools['specs']): number {
  let n = specTokens.get(specs);
  if (n === undefined) specTokens.set(specs, (n = specs.length === 0 ? 0 : Math.ceil(JSON.stringify(specs).length / 4)));
  return n;
}

/** The output instruction's estimate (its JSON Schema, 4 characters a token), once per spec. */
const schemaTokens = new WeakMap<OutputSpec, number>();
export function outputTokens(out: OutputSpec): number {
  let n = schemaTokens.get(out);
  if (n === undefined) schemaTokens.set(out, (n = Math.ceil(JSON.stringify(out.record.jsonSchema).length / 4)));
  return n;
}

/** `usage` priced by the app's pricing: its cost, the error it threw, or nothing (no pricing, no usage). */
export function pricedUsage(env: SessionServices, usage: Usage | undefined): { cost?: string } | { pricingError: unknown } {
  if (!env.pricing || !usage) return {};
  try {
    return { cost: priceOf(env, usage) };
  } catch (e) {
    return { pricingError: e };
  }
}

/** What a call counts at its reservation. */
export const countedAt = (r: Reservation): Counted => ({ outputTokens: r.outputTokens, cost: r.cost ?? '0' });
