/**
 * One seed of the simulator's tree family: a root session whose model calls sub-agents
 * (agentTool `researcher`, parallel; `auditor`, exclusive) and writes its own ledger entries; each
 * child session writes ledger entries (exclusive, reconcilable), stamps (exclusive, no reconcile)
 * and looks things up (parallel). The real runtime runs the tree in simulated processes over the
 * fault-injecting store of simulate.ts, which crash at any commit point or at any instant, are
 * paused and taken over, while a client cancels, stops and detaches the root at random moments.
 * When the world is at rest, a fault-free process resumes the root; then the hand-over invariants
 * (tree-invariants.ts) and the simulator's own (invariants.ts) are checked on every session's log,
 * with nothing nudged.
 *
 * `restart-child` is the seeded bug: the agent tools are bound with a host that opens a fresh
 * child session each time a call runs, so a recovered call starts its child again.
 * Must not import vitest.
 */
import { boundAgentTool, type ChildHost } from '../../src/runtime/agent-calls.js';
import { createRuntime, type Runtime } from '../../src/runtime/runtime.js';
import type { ExecutionSession } from '../../src/runtime/execution-session.js';
import { memoryStore } from '../../src/persistence/memory-store.js';
import type { EventRecord } from '../../src/contracts/events.js';
import type { Envelope } from '../../src/streams/envelopes.js';
import type { ExecutionRequest } from '../../src/contracts/requests.js';
import { agentTool } from '../../src/tools/agent-tool.js';
import { agentMarkOf } from '../../src/tools/agent-marks.js';
import type { AnyTool } from '../../src/tools/define-tool.js';
import { AckLedger, faultyStore, type FaultControl } from './faulty-store.js';
import { Ledgers, simDelivery, type Outside } from './outside.js';
import { checkInvariants, type SeedFacts } from './invariants.js';
import { traceLine } from './simulate.js';
import { HandOver, treeViolations, type TreeExercised } from './tree-invariants.js';
import { AGENT_TOOL_MODE, NO_TREE_FAULTS, rootModel, SUB_AGENTS, subAgents, treeTools, type TreeOutside } from './tree-outside.js';
import { Watch, watchedStore } from './watch.js';
import { attemptIn, dropEveryProcess, Hosts, inProc, type Host } from './hosts.js';
import { World } from './world.js';

export type TreeBroken = 'restart-child';
export const TREE_BROKEN: readonly string[] = ['restart-child'] satisfies TreeBroken[];

export interface TreeSeedReport {
  seed: number;
  violations: string[];
  trace: string[];
  choices: number;
  stats: { sessions: number; events: number; crashes: number; takeovers: number };
  exercised: TreeExercised;
}

const ROOT = 't';
const MAX_TASKS = 30_000;

export async function runTreeSeed(opts: { seed: number; prefix?: number; broken?: TreeBroken }): Promise<TreeSeedReport> {
  const world = new World(opts.seed, opts.prefix ?? Infinity);
  const rng = world.rng;
  const level = () => rng.pick([0, 0.02, 0.06]);
  const ctl: FaultControl = {
    faults: {
      fail: level(),
      ackLost: level(),
      crash: rng.pick([0, 0.02, 0.05]),
      readFail: rng.pick([0, 0.01]),
      repeat: rng.pick([0, 0.05]),
    },
    crashesLeft: rng.int(4),
    // as on the memory and LMDB stores: a child's writer, guarded by its parent's, sees the parent fenced at once
    syncEpoch: true,
  };
  const ledgers = new Ledgers();
  const watch = new Watch();
  const handOver = new HandOver(ROOT);
  let callN = 0;
  const outside: TreeOutside = {
    world,
    ledgers,
    watch,
    faults: {
      modelRetryable: level(),
      modelStall: rng.pick([0, 0.02]),
      toolFail: level(),
      toolLate: level(),
      toolHang: rng.pick([0, 0.03]),
    },
    nextCallId: () => `c${++callN}`,
    rootRounds: rng.range(1, 2),
    onToolStart: (sid, callId) => handOver.toolStarted(sid, callId),
  };
  const prompts = 1 + rng.int(2);
  const config = { maxProviderAttempts: 3, retryBackoffMs: 10, cancelGraceMs: 50 };
  const budget = { maxSteps: 20 };
  world.note(
    `tree profile: store ${JSON.stringify(ctl.faults)} crashes<=${ctl.crashesLeft}, root rounds ${outside.rootRounds}, prompts ${prompts}`,
  );

  const durable = watchedStore(memoryStore(), watch, [ROOT], (r) => handOver.observe(r));
  const acks = new AckLedger();
  let idN = 0;
  const facts: SeedFacts = { budget, idempotentOwner: true, receipts: new Set(), recoveries: [] };
  let crashes = 0;
  let takeovers = 0;
  let restartN = 0;

  const boot = (): Host => {
    const proc = world.newProc();
    const agents = subAgents(outside, proc);
    const ownLedger = treeTools(outside, proc).filter((t) => t.name === 'ledger');
    let runtime: Runtime | undefined;
    // the seeded bug: every run of a call opens a child session of its own (a recovered call starts its child again)
    const restarting: ChildHost = {
      store: durable,
      pools: new Map(),
      open: (id, agent) => runtime!.openSession(`${id}~${++restartN}`, { agent, takeover: true }),
    };
    const agentTools: AnyTool[] = agents.map((a) => {
      const t = agentTool(a, { mode: AGENT_TOOL_MODE[a.name as (typeof SUB_AGENTS)[number]] });
      const mark = agentMarkOf(t);
      return opts.broken === 'restart-child' && mark?.kind === 'agent' ? boundAgentTool(t, mark, restarting) : t;
    });
    runtime = createRuntime({
      store: faultyStore(durable, proc, world, ctl, acks, watch),
      model: rootModel(outside, proc),
      tools: [...agentTools, ...ownLedger],
      // the root's final goes to an idempotent owner that never fails (a child's is its call's result)
      delivery: simDelivery({ world, ledgers, faults: { deliveryThrow: 0 } } as Outside, proc, true),
      agents,
      systemPrompt: 'sim root',
      config,
      budget,
      clock: proc.clock(),
      ids: { instanceId: () => `i${++idN}`, eventId: () => `e${++idN}` },
    });
    return { proc, runtime, sessions: new Map() };
  };

  let finalPhase = false;
  const runsOf = { current: undefined as { runId: string; runEpoch: number; instance: string } | undefined };
  const hosts = new Hosts(world, facts, boot, {
    ended: () => finalPhase,
    crashed: () => {
      crashes++;
      handOver.crashed();
    },
    opened: (_, s) => {
      s.events$.subscribe((env: Envelope) => {
        if (env.event.type === 'run_start')
          runsOf.current = { runId: env.event.runId, runEpoch: env.event.runEpoch, instance: env.event.sessionInstanceId };
      });
      const open = s.recovery.interruptedRuns[0];
      if (open) runsOf.current = { runId: open.runId, runEpoch: open.runEpoch, instance: s.sessionInstanceId };
    },
  });
  const sessionOf = () => hosts.session(ROOT);

  let attemptN = 0;
  const attempt = (h: Host, s: ExecutionSession, req: ExecutionRequest) => attemptIn(world, facts, ROOT, { h, s }, req);
  /** Continues the root's open run, if any (a tree has no approvals: an open run is continued). */
  const resume = async (h: Host, s: ExecutionSession): Promise<'none' | 'done' | 'gone'> => {
    const status = s.snapshot().status;
    if (status !== 'suspended' && status !== 'detached') return 'none';
    const runId = runsOf.current?.runId ?? s.recovery.interruptedRuns[0]?.runId;
    if (!runId) return 'none';
    const locks = s.activeResourceLocks;
    if (locks.length > 0) await inProc(h.proc, s.releaseResources(locks));
    return (await attempt(h, s, { kind: 'continue', runId, attemptId: `${runId}.a${++attemptN}` })) ? 'done' : 'gone';
  };

  const client = async () => {
    let promptN = 0;
    for (let actions = 0; actions < 14; actions++) {
      if (finalPhase) return;
      const at = await sessionOf();
      if (finalPhase) return;
      if (!at) continue;
      const { h, s } = at;
      if ((await resume(h, s)) !== 'none') continue;
      if (!(await inProc(h.proc, s.waitForIdle()))) continue;
      const status = s.snapshot().status;
      if (status === 'suspended' || status === 'detached') continue;
      if (promptN >= prompts) return;
      promptN++;
      await attempt(h, s, { kind: 'prompt', runId: `r${promptN}`, attemptId: `r${promptN}.a1`, message: `task ${promptN}` });
    }
  };

  // control of the root at random moments: a cancel, a stop after the round, a detach
  const chaos = (n: number) => {
    for (let i = 0; i < n; i++) {
      world.at(world.now + rng.range(1, 500), () => {
        const h = hosts.current;
        const p = h.sessions.get(ROOT);
        if (!p || !h.proc.alive || finalPhase) return;
        const kind = rng.int(3);
        void p.then(async (s) => {
          if (!s) return;
          const cur = runsOf.current;
          if (kind === 0) {
            world.note(`${ROOT}: requestCancel`);
            await inProc(h.proc, s.requestCancel());
          } else if (kind === 1) world.note(`${ROOT}: requestDetach → ${s.requestDetach()}`);
          else if (cur && cur.instance === s.sessionInstanceId) {
            world.note(`${ROOT}: stop after round ${cur.runId}#${cur.runEpoch}`);
            await inProc(
              h.proc,
              s.stopAfterCurrentToolRound({
                sessionId: ROOT,
                sessionInstanceId: cur.instance,
                interactionId: cur.runId,
                expectedRunEpoch: cur.runEpoch,
                idempotencyKey: `stop-${cur.runId}-${cur.runEpoch}`,
              }),
            ).catch(() => undefined);
          }
        });
      });
    }
  };

  // process faults at any instant: a crash, or a takeover (the old writer paused, woken later)
  const procFaults = 1 + rng.int(3);
  for (let i = 0; i < procFaults; i++) {
    world.at(world.now + rng.range(5, 700), () => {
      if (finalPhase) return;
      const h = hosts.current;
      if (!h.proc.alive || h.proc.superseded) return;
      if (rng.int(3) > 0) {
        world.note(`world: crash proc ${h.proc.id}`);
        h.proc.crash();
      } else {
        takeovers++;
        handOver.crashed();
        world.note(`world: takeover of proc ${h.proc.id}`);
        h.proc.pause();
        h.proc.supersede();
        hosts.replace(true);
        world.at(world.now + rng.range(1, 300), () => h.proc.wake());
      }
    });
  }

  void client();
  chaos(rng.int(3));
  if (!(await world.run(MAX_TASKS))) world.note('world: task limit reached');

  // the last word: every process dropped, a fault-free one resumes the root (and through it, its children)
  finalPhase = true;
  dropEveryProcess(world, ctl);
  outside.faults = NO_TREE_FAULTS;
  outside.rootRounds = 0;
  hosts.replace(false);
  let settled = false;
  void (async () => {
    const before = await durable.getHead(ROOT);
    if (!(before && before.openRun === null && before.heldLocks.length === 0)) {
      for (let i = 0; i < 8; i++) {
        const at = await sessionOf();
        if (!at) continue;
        await inProc(at.h.proc, at.s.waitForIdle());
        if ((await resume(at.h, at.s)) === 'none') break;
      }
      const at = await sessionOf();
      if (at) await inProc(at.h.proc, at.s.waitForIdle());
    }
    await hosts.current.runtime.close();
    settled = true;
  })();
  const finalFinished = await world.run(MAX_TASKS * 2);

  const logs = new Map<string, EventRecord[]>();
  for (const sid of await durable.listSessions()) {
    const log: EventRecord[] = [];
    for await (const e of durable.readEvents(sid)) log.push(e);
    logs.set(sid, log);
  }
  const tree = treeViolations({ root: ROOT, logs, facts, orderOf: handOver.orderOf, toolStarts: handOver.toolStarts });
  const violations = [...tree.violations, ...checkInvariants({ logs, acks, ledgers, facts, leftOpen: tree.leftOpen }), ...watch.problems];
  if (!finalFinished || !settled)
    violations.unshift(
      `the fault-free recovery did not finish (${finalFinished ? 'it waits on something no task will resolve' : 'task limit'})`,
    );
  // an agent call's continue attempts of its child are named with a random UUID: the one thing a replay does not repeat
  const trace = [
    ...world.notes,
    ...[...logs.values()].flatMap((l) => l.map((e) => traceLine(e).replace(/continue-[0-9a-f-]{36}/g, 'continue-<uuid>'))),
  ];
  return {
    seed: opts.seed,
    violations,
    trace,
    choices: rng.choices.length,
    stats: { sessions: logs.size, events: [...logs.values()].reduce((n, l) => n + l.length, 0), crashes, takeovers },
    exercised: handOver.exercised(logs, ledgers),
  };
}
