import { runSeed } from './simulate.js';
const t0 = performance.now();
for (let s = 1; s <= 200; s++) await runSeed({ seed: s, prefix: 0 });
console.log('benign ms/seed', (performance.now() - t0) / 200);
