/**
 * The peer benchmark's workload, the same for every row: a scripted model takes K steps; each of
 * the first K-1 asks for two tool calls (`lookup` and `write`, argument `i` = the step), the last
 * answers "done". Each tool returns a value derived from its argument, and the model CHECKS, at
 * every step, that the two results of the previous step reached it intact — a framework that
 * loses or garbles a tool result fails the row instead of reporting a fast wrong number.
 *
 * The model is stateless: it reads its step from the conversation it is handed (the number of
 * tool results in it, two per step), so one model serves any number of concurrent sessions.
 */

export type Variant = {
  /** Steps per session. */
  k: number;
  /** Sessions per repetition (1 = one long session). */
  sessions: number;
  /** Sessions in flight at once. */
  inFlight: number;
  /** Milliseconds each model call and each tool call waits (0 = instant). */
  modelMs: number;
  toolMs: number;
};

export const TOOL_NAMES = ['lookup', 'write'] as const;
export type ToolName = (typeof TOOL_NAMES)[number];

/** What tool `name` returns for argument `i`. */
export function toolValue(name: ToolName, i: number): string {
  return name === 'lookup' ? `L${i * 7 + 3}` : `W${i * 11 + 5}`;
}

/** What the model does next, given every tool result of the conversation so far (in order). */
export type Decision =
  | { kind: 'tools'; step: number; calls: { id: string; name: ToolName; i: number }[] }
  | { kind: 'answer'; text: string };

/**
 * One model step. `results` are the conversation's tool results, oldest first, each as the text the
 * framework handed the model (`name` when the framework reports it). Throws when the last step's
 * results are missing or wrong.
 */
export function decide(k: number, results: readonly { text: string; name?: string }[], session = ''): Decision {
  if (results.length % 2 !== 0) throw new Error(`scripted model: ${results.length} tool results, expected two per step`);
  const step = results.length / 2;
  if (step > 0) {
    const got = results.slice(-2).map((r) => r.text);
    const want = TOOL_NAMES.map((n) => toolValue(n, step - 1));
    for (const w of want) {
      if (!got.some((g) => g === w || g === JSON.stringify(w)))
        throw new Error(`scripted model (session ${session}), step ${step}: tool results ${JSON.stringify(got)} do not hold ${w}`);
    }
  }
  if (step >= k - 1) return { kind: 'answer', text: `done after ${step} tool steps` };
  return { kind: 'tools', step, calls: TOOL_NAMES.map((name) => ({ id: `c${step}_${name}`, name, i: step })) };
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Runs `count` sessions, `inFlight` at a time; `one(n)` runs session n. */
export async function pool(count: number, inFlight: number, one: (n: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) await one(next++);
  };
  await Promise.all(Array.from({ length: Math.min(inFlight, count) }, worker));
}

/** Checks a session's final answer: the model answered after K-1 tool steps. */
export function checkAnswer(k: number, text: string | undefined, session = ''): void {
  if (text !== `done after ${k - 1} tool steps`)
    throw new Error(`session ${session}: final answer ${JSON.stringify(text)}, expected "done after ${k - 1} tool steps"`);
}
