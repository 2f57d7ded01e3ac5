import { z } from 'zod';
import { InputHistory } from '../contracts/message.js';
import { JsonValue, recordOf } from '../contracts/json.js';

export { JsonValue } from '../contracts/json.js';

export { answerSchema } from '../contracts/json-schema.js';
export const ApprovalAnswer = z.strictObject({ decisions: recordOf(z.enum(['approve', 'deny'])) });
export const Checkpoint = z.strictObject({ messages: InputHistory, stateContext: JsonValue.optional() });
