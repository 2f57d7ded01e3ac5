import { runSeed } from './simulate.js';
let tasks = 0; const N = Number(process.argv[2] ?? 300);
await runSeed({ seed: 0 });
const c0 = process.cpuUsage(); const t0 = performance.now();
for (let s = 1; s <= N; s++) { const r = await runSeed({ seed: s }); tasks += r.tasks; }
const c = process.cpuUsage(c0);
console.log('wall ms/seed', ((performance.now() - t0) / N).toFixed(1), 'cpu ms/seed', ((c.user + c.system) / 1000 / N).toFixed(1), 'tasks/seed', tasks / N);
