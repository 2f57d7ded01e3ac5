import type { LeaseInfo, WorkerInfo } from '../contracts/inbox.js';
import type { CommandIO } from './commands.js';
import { openSource, withStore } from './data.js';
import { CliError, EXIT } from './errors.js';

const say = (io: CommandIO, text: string) => io.out.write(`${text}\n`);

/** A gone worker whose last heartbeat is older than this is listed only with `--all`. */
export const GONE_WORKER_SHOWN_MS = 60 * 60 * 1000;

/**
 * `actorloop workers`: the serving workers the store knows (live or not by their heartbeat; those
 * gone for more than an hour only with `all`), the sessions they hold under leases, and the
 * sessions whose inbox has entries waiting or whose run waits to be resumed.
 */
export async function workersCommand(
  opts: { data?: string; postgres?: string; json?: boolean; all?: boolean },
  io: CommandIO,
): Promise<number> {
  const src = openSource(opts);
  return withStore(src.store, async (store) => {
    if (!store.work) throw new CliError(`${src.where} has no inbox or leases`, EXIT.usage);
    const known: WorkerInfo[] = await store.work.listWorkers();
    const leases: LeaseInfo[] = await store.work.listLeases();
    const shownSince = Date.now() - GONE_WORKER_SHOWN_MS;
    const workers = opts.all ? known : known.filter((x) => x.live || Date.parse(x.heartbeatAt) >= shownSince);
    const hidden = known.length - workers.length;
    if (opts.json) {
      say(io, JSON.stringify({ workers, leases }));
      return EXIT.ok;
    }
    if (known.length === 0) say(io, `no serving workers registered in ${src.where}`);
    else if (workers.length > 0) {
      const w = Math.max(6, ...workers.map((x) => x.workerId.length));
      say(io, `${'worker'.padEnd(w)}  state  host:pid                   sessions  heartbeat`);
      for (const x of workers) {
        const held = leases.filter((l) => l.workerId === x.workerId && !l.expired).length;
        const state = (x.live ? 'live' : 'gone').padEnd(5);
        const where = `${x.host}:${x.pid}`.padEnd(25);
        say(io, `${x.workerId.padEnd(w)}  ${state}  ${where}  ${`${held}/${x.concurrency}`.padStart(8)}  ${x.heartbeatAt}`);
      }
    }
    if (hidden > 0) say(io, `(${hidden} worker${hidden === 1 ? '' : 's'} gone for more than an hour not shown: --all lists them)`);
    if (leases.length > 0) {
      say(io, '');
      const w = Math.max(7, ...leases.map((l) => l.sessionId.length));
      say(io, `${'session'.padEnd(w)}  lease`);
      for (const l of leases) {
        const lease =
          l.workerId === null
            ? 'none'
            : `${l.workerId} epoch ${l.writerEpoch ?? '(attaching)'} ${l.expired ? 'EXPIRED' : 'until'} ${l.leaseUntil}`;
        const waiting = l.inboxSeq - l.appliedSeq;
        const inbox = waiting > 0 ? `, ${waiting} inbox entr${waiting === 1 ? 'y' : 'ies'} waiting` : '';
        say(io, `${l.sessionId.padEnd(w)}  ${lease}${inbox}${l.resume ? ', a run to resume' : ''}`);
      }
    }
    return EXIT.ok;
  });
}
