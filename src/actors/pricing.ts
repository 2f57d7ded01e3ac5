import { isDecimal } from '../contracts/config.js';
import { ValidationError } from '../contracts/errors.js';
import type { Usage } from '../contracts/message.js';
import type { SessionServices } from './session-services.js';

/**
 * The app's `pricing` for one model call, checked here (in an actor): a price that is not a decimal
 * string fails the run with a ValidationError naming it, and the run still ends with `run/end`.
 */
export function priceOf(env: Pick<SessionServices, 'pricing' | 'model'>, usage: Usage): string {
  const cost: unknown = env.pricing!(usage, env.model.modelId);
  if (!isDecimal(cost)) {
    throw new ValidationError('pricing', [
      { path: [], message: `pricing returned ${JSON.stringify(cost) ?? String(cost)}, not a non-negative decimal string such as "0.25"` },
    ]);
  }
  return cost;
}
