// require() of the package from CommonJS: the same ESM build as import (test/packaging/install.test.ts).
const required = require('actorloop');
const { createRuntime, memoryStore, scriptedModel, ValidationError } = required;

(async () => {
  const imported = await import('actorloop');
  const same = imported.ValidationError === ValidationError && imported.createRuntime === createRuntime;
  const runtime = createRuntime({ store: memoryStore(), model: scriptedModel(['hello from require']) });
  const session = await runtime.openSession('cjs-1');
  const result = await session.execute({ kind: 'prompt', runId: 'r1', attemptId: 'a1', message: 'hi' });
  let typed = false;
  try {
    await session.execute({ kind: 'prompt', runId: '', attemptId: 'a2', message: 'hi' });
  } catch (e) {
    typed = e instanceof imported.ValidationError;
  }
  await runtime.close();
  console.log(JSON.stringify({ same, outcome: result.outcome, finalMessage: result.finalMessage, typed }));
})();
