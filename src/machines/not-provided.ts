/**
 * The default of an actor a machine registers and the runtime provides (`machine.provide({ actors })`):
 * without it, the phase fails naming the actor instead of hanging.
 */
export const notProvided = (name: string) => async (): Promise<never> => {
  throw new Error(`the ${name} actor is not provided`);
};
