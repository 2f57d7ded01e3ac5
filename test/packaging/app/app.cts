// The require() side, type-checked too (test/packaging/install.test.ts).
import actorloop = require('actorloop');

export const store: ReturnType<typeof actorloop.memoryStore> = actorloop.memoryStore();
export const isTyped = (e: unknown): boolean => e instanceof actorloop.ValidationError;
