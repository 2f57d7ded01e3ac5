/**
 * The PostgreSQL side of the serve bench (bench/serve.ts): CPU time of the database's backends
 * (from /proc/<pid>/stat, the pids from pg_stat_activity), of the server's own processes (WAL
 * writer, checkpointer, background writer, autovacuum), of the whole machine, and — with
 * `waits` — a sample every 20 ms of what the backends are doing (state and wait_event) and of
 * lock requests not granted (pg_locks). Linux only for the CPU times (0 elsewhere).
 */
import { readdirSync, readFileSync } from 'node:fs';
import type pg from 'pg';

export interface ServerProbe {
  /** CPU ms of the database's backends between start and stop. */
  backendCpuMs: number;
  backends: number;
  /** CPU ms of the server's WAL writer, checkpointer, background writer and autovacuum. */
  auxCpuMs: number;
  /** CPU ms of the whole machine (every process, every core) and the wall ms. */
  machineCpuMs: number;
  wallMs: number;
  /** `state/wait_event_type:wait_event` → backends seen so, summed over samples. */
  waits: Record<string, number>;
  samples: number;
  /** Samples with at least one lock request not granted, and the most seen at once. */
  lockWaitSamples: number;
  maxUngranted: number;
}

const TICK_MS = 10; // USER_HZ = 100 on Linux

function cpuMsOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) * TICK_MS; // utime, stime (fields 14, 15)
  } catch {
    return undefined;
  }
}

export function machineCpuMs(): number {
  try {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal: busy = all but idle and iowait
    return (f.reduce((a, b) => a + b, 0) - f[3]! - f[4]!) * TICK_MS;
  } catch {
    return 0;
  }
}

const AUX = ['walwriter', 'checkpointer', 'background writer', 'autovacuum'];
function auxCpuMs(): number {
  let sum = 0;
  let pids: string[] = [];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    return 0;
  }
  for (const p of pids) {
    try {
      const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8');
      if (cmd.startsWith('postgres:') && AUX.some((a) => cmd.includes(a))) sum += cpuMsOf(Number(p)) ?? 0;
    } catch {
      // gone
    }
  }
  return sum;
}

/** Starts watching database `db` through `client` (a connection of its own, excluded). */
export function serverProbe(client: pg.Client, db: string, options: { waits: boolean }) {
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  const waits: Record<string, number> = {};
  let samples = 0;
  let lockWaitSamples = 0;
  let maxUngranted = 0;
  let t0 = 0;
  let m0 = 0;
  let a0 = 0;
  let timer: NodeJS.Timeout | undefined;
  let running = false;
  let stopped = false;

  const sample = async (kind: 'first' | 'cpu' | 'all') => {
    const rows = (
      await client.query(
        `SELECT pid, state, coalesce(wait_event_type, '') AS wt, coalesce(wait_event, '') AS we, left(regexp_replace(query, '\\s+', ' ', 'g'), 24) AS q FROM pg_stat_activity
          WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
        [db],
      )
    ).rows as { pid: number; state: string | null; wt: string; we: string; q: string }[];
    for (const r of rows) {
      const ms = cpuMsOf(r.pid);
      if (ms === undefined) continue;
      if (!first.has(r.pid)) first.set(r.pid, kind === 'first' ? ms : 0);
      last.set(r.pid, ms);
    }
    if (!options.waits || kind !== 'all') return;
    samples++;
    for (const r of rows) {
      // a lock wait names the statement waiting
      const k = `${r.state ?? '?'}${r.wt ? `/${r.wt}:${r.we}` : ''}${r.wt === 'Lock' ? ` (${r.q})` : ''}`;
      waits[k] = (waits[k] ?? 0) + 1;
    }
    const n = Number((await client.query(`SELECT count(*) AS n FROM pg_locks WHERE NOT granted`)).rows[0].n);
    if (n > 0) lockWaitSamples++;
    maxUngranted = Math.max(maxUngranted, n);
  };

  const loop = () => {
    timer = setTimeout(
      () => {
        if (stopped) return;
        running = true;
        void sample('all')
          .catch(() => undefined)
          .finally(() => {
            running = false;
            if (!stopped) loop();
          });
      },
      options.waits ? 20 : 200,
    );
  };

  return {
    async start(): Promise<void> {
      await sample('first');
      t0 = performance.now();
      m0 = machineCpuMs();
      a0 = auxCpuMs();
      loop();
    },
    async stop(): Promise<ServerProbe> {
      stopped = true;
      clearTimeout(timer);
      while (running) await new Promise((r) => setTimeout(r, 5));
      const wallMs = performance.now() - t0;
      const machine = machineCpuMs() - m0;
      const aux = auxCpuMs() - a0;
      await sample('cpu').catch(() => undefined);
      let backendCpuMs = 0;
      for (const [pid, ms] of last) backendCpuMs += ms - (first.get(pid) ?? 0);
      return {
        backendCpuMs,
        backends: last.size,
        auxCpuMs: aux,
        machineCpuMs: machine,
        wallMs,
        waits,
        samples,
        lockWaitSamples,
        maxUngranted,
      };
    },
  };
}
