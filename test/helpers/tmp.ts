import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function tempDir(prefix = 'actorloop-'): { path: string; cleanup: () => Promise<void> } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, cleanup: async () => rmSync(path, { recursive: true, force: true }) };
}
