import { walkStore } from './verify-walk.js';

/**
 * The child process of `verifyStore` (verify.ts): walks the store at argv[2] and prints one JSON
 * line per step that may crash (`{"at":…}`), then `{"result":…}`. Run by `node verify-child.js
 * <path>` (under tsx from the sources).
 */
const path = process.argv[2];
if (!path) {
  process.stderr.write('usage: verify-child <store path>\n');
  process.exit(2);
}
const say = (line: unknown) => process.stdout.write(`${JSON.stringify(line)}\n`);
const result = walkStore(path, (where, sessionId, seq) => say({ at: { where, ...(sessionId === undefined ? {} : { sessionId }), ...(seq === undefined ? {} : { seq }) } }));
say({ result });
