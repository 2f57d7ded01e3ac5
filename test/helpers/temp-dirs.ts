import { afterEach } from 'vitest';
import { tempDir } from './tmp.js';

/**
 * A maker of temp dirs for the calling test file: each dir it makes is removed after its test,
 * once `before` (e.g. killing the child processes that use the dirs) has run.
 */
export function tempDirs(prefix: string, before?: () => unknown): () => string {
  const made: { cleanup: () => Promise<void> }[] = [];
  afterEach(async () => {
    await before?.();
    for (const d of made.splice(0)) await d.cleanup();
  });
  return () => {
    const d = tempDir(prefix);
    made.push(d);
    return d.path;
  };
}
