import { z } from 'zod';
import { defineTool } from './define-tool.js';

export const ASK_USER_TOOL = 'askUser';

function compiles(schema: Record<string, unknown>): boolean {
  try {
    z.fromJSONSchema(schema as never);
    return true;
  } catch {
    return false;
  }
}

/**
 * The built-in `askUser` tool (the seed's `hitl_builtin`), enabled with the runtime's `askUser`
 * option. The runtime never executes it: a call suspends the run with a `question` pending
 * request, and the `respond` answer becomes its tool result. It must be the only call of its
 * batch.
 */
export const askUserTool = defineTool({
  name: ASK_USER_TOOL,
  description:
    'Ask the user a question and wait for the answer. Use only when you cannot proceed without it. ' +
    'Optionally pass a JSON Schema the answer must match. Call it alone, not beside other tools.',
  mode: 'exclusive',
  parameters: z.object({
    question: z.string().min(1),
    schema: z
      .record(z.string(), z.unknown())
      .refine(
        compiles,
        'not a JSON Schema the runtime can check an answer against (a zod-compilable JSON Schema, e.g. { "type": "string" })',
      )
      .optional(),
  }),
  execute: () => {
    throw new Error('askUser is answered through session.execute({ kind: "respond" }), never executed');
  },
});

/** `*` matches any run of characters, `?` one character; everything else is literal. */
export function globMatch(pattern: string, text: string): boolean {
  const re = new RegExp(
    `^${pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
  );
  return re.test(text);
}

/** Whether a call of tool `name` matches one of the `approvalFor` globs (`name` or `tool:<name>`). */
export function matchesApprovalFor(globs: readonly string[], name: string): boolean {
  return globs.some((g) => globMatch(g, name) || globMatch(g, `tool:${name}`));
}
