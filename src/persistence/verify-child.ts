import { exerciseCopy } from './verify-exercise.js';
import { walkStore } from './verify-walk.js';

/**
 * The child process of `verifyStore` (verify.ts): walks the store at argv[2], then exercises
 * the paths of readers and writers in a throwaway copy of data.mdb (verify-exercise.ts). It
 * prints one JSON line per step that may crash (`{"at":…}`), what the walk found
 * (`{"walked":…}`, kept by the parent if the exercise kills this process), then `{"result":…}`.
 * Run by `node verify-child.js <path> <temp dir>` (under tsx from the sources); the parent makes
 * the temp dir for the copy and removes it.
 */
const [path, scratch] = process.argv.slice(2);
if (!path || !scratch) {
  process.stderr.write('usage: verify-child <store path> <empty temp dir>\n');
  process.exit(2);
}
const say = (line: unknown) => process.stdout.write(`${JSON.stringify(line)}\n`);
const walked = walkStore(path, (where, sessionId, seq) =>
  say({ at: { where, ...(sessionId === undefined ? {} : { sessionId }), ...(seq === undefined ? {} : { seq }) } }),
);
say({ walked });
// a data.mdb the walk already found damaged (or that is missing) has nothing more to tell
const exercised =
  walked.dataSound && !walked.problems.some((p) => p.where === 'data.mdb')
    ? await exerciseCopy(path, scratch, (step) => say({ at: { where: 'data.mdb', step } }))
    : [];
say({ result: { problems: [...walked.problems, ...exercised], checked: walked.checked } });
