/**
 * SubscriberHub fan-out: 1,000 subscribers on a 10,000-envelope run. Shows that non-required
 * subscribers never hold the producer back and that memory stays bounded (one queue of at most
 * `capacity` shared envelope references per subscriber) even when some of them cannot keep up.
 *
 * `publish call` is the synchronous part of `publish` (handing the envelope to 1,000 queues);
 * `await` is the rest until its promise resolved, which includes the listeners' own work run in
 * between (microtasks), and for a required subscriber the wait for room.
 *
 * Heap figures are `process.memoryUsage().heapUsed` samples (every 250 envelopes); `before` and
 * `after` run `global.gc` first when node was started with --expose-gc (tsx's runner usually is
 * not, so they include garbage not yet collected).
 */
import type { Envelope } from '../src/streams/envelopes.js';
import { SubscriberHub, type SubscriberListener } from '../src/streams/subscribers.js';
import { median, percentile, printTable } from './table.js';

const SUBSCRIBERS = 1000;
const ENVELOPES = 10_000;
const SAMPLE_EVERY = 250;
const MB = 1024 * 1024;

type Kind = 'sync' | 'async' | 'slow' | 'required';

interface Scenario {
  name: string;
  /** Kind of subscriber i. */
  kindOf: (i: number) => Kind;
  /** Yield to the event loop every this many envelopes (0: never, a tight producer). */
  yieldEvery: number;
}

const SCENARIOS: Scenario[] = [
  { name: '1000 sync', kindOf: () => 'sync', yieldEvery: 0 },
  { name: '1000 async', kindOf: () => 'async', yieldEvery: 0 },
  { name: '900 async + 100 slow', kindOf: (i) => (i % 10 === 0 ? 'slow' : 'async'), yieldEvery: 0 },
  { name: '900 async + 100 slow, yielding', kindOf: (i) => (i % 10 === 0 ? 'slow' : 'async'), yieldEvery: 100 },
  { name: '1 required + 999 async', kindOf: (i) => (i === 0 ? 'required' : 'async'), yieldEvery: 0 },
];

const gc = (globalThis as { gc?: () => void }).gc;
const heap = () => process.memoryUsage().heapUsed;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const tick = () => new Promise<void>((r) => setImmediate(r));

function listener(kind: Kind, counter: { n: number }): SubscriberListener {
  switch (kind) {
    case 'sync':
      return () => void counter.n++;
    case 'async':
    case 'required':
      return async () => void counter.n++;
    case 'slow':
      return async () => {
        counter.n++;
        await sleep(2);
      };
  }
}

function envelope(seq: number): Envelope {
  return { runId: 'r1', attemptId: 'a1', seq, event: { type: 'message_delta', role: 'assistant', text: `token ${seq} `.repeat(8) } };
}

async function runScenario(s: Scenario) {
  gc?.();
  const before = heap();
  let peak = before;
  const hub = new SubscriberHub({ maxErrors: SUBSCRIBERS });
  const delivered = { n: 0 };
  for (let i = 0; i < SUBSCRIBERS; i++) {
    const kind = s.kindOf(i);
    hub.subscribe(listener(kind, delivered), { name: `${kind}-${i}`, required: kind === 'required' });
  }
  const callUs: number[] = [];
  const awaitMs: number[] = [];
  const t0 = performance.now();
  for (let seq = 1; seq <= ENVELOPES; seq++) {
    const p0 = performance.now();
    const p = hub.publish(envelope(seq));
    const p1 = performance.now();
    await p;
    callUs.push((p1 - p0) * 1000);
    awaitMs.push(performance.now() - p1);
    if (seq % SAMPLE_EVERY === 0) peak = Math.max(peak, heap());
    if (s.yieldEvery && seq % s.yieldEvery === 0) await tick();
  }
  const publishedMs = performance.now() - t0;
  await hub.whenIdle();
  const drainedMs = performance.now() - t0;
  peak = Math.max(peak, heap());
  const errors = hub.takeErrors();
  const open = hub.size;
  hub.close();
  gc?.();
  const after = heap();
  return {
    s,
    publishedMs,
    drainedMs,
    callUs,
    awaitMs,
    delivered: delivered.n,
    closed: errors.filter((e) => e.reason === 'closed').length,
    otherErrors: errors.length - errors.filter((e) => e.reason === 'closed').length,
    open,
    before,
    peak,
    after,
  };
}

export async function benchSubscribers(): Promise<void> {
  console.log(
    `${SUBSCRIBERS} subscribers (capacity 256, timeout 1000 ms), ${ENVELOPES.toLocaleString('en-US')} envelopes; slow = 2 ms per envelope; global.gc ${gc ? 'used' : 'not available'}\n`,
  );
  await runScenario(SCENARIOS[0]!); // warm-up
  const rows = [];
  for (const s of SCENARIOS) {
    const r = await runScenario(s);
    rows.push([
      s.name,
      Math.round((ENVELOPES / r.publishedMs) * 1000),
      Math.round((r.delivered / r.drainedMs) * 1000),
      median(r.callUs).toFixed(1),
      percentile(r.awaitMs, 99).toFixed(2),
      r.delivered,
      r.closed,
      r.otherErrors,
      r.open,
      (r.before / MB).toFixed(1),
      (r.peak / MB).toFixed(1),
      ((r.peak - r.before) / MB).toFixed(1),
      (r.after / MB).toFixed(1),
    ]);
  }
  printTable(
    [
      'scenario',
      'envelopes/s',
      'deliveries/s',
      'publish call p50 µs',
      'await p99 ms',
      'delivered',
      'closed',
      'other errors',
      'still open',
      'heap before MB',
      'heap peak MB',
      'peak - before MB',
      'heap after MB',
    ],
    rows,
    ['left', ...Array<'right'>(12).fill('right')],
  );
}
