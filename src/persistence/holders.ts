import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type { SessionHolder } from '../contracts/errors.js';

export type { SessionHolder };

/** A holder as a store records it: the process's start time (Linux) tells a reused pid from the holder. */
export interface HolderRecord extends SessionHolder {
  /** Field 22 of /proc/<pid>/stat (clock ticks after boot); absent where there is no /proc (macOS). */
  startTime?: string;
}

/**
 * Optional on an EventStore (`store.holders`): which live process writes each session, so that
 * `openSession` refuses a session another live process holds (SessionHeldError) and takes one over
 * at once when its holder has died. A store without it never refuses (docs/guarantees.md).
 * @example
 * const holder = await store.holders?.claim('s1', { takeover: false })
 * if (holder) throw new SessionHeldError('s1', holder)
 */
export interface SessionHolders {
  /**
   * Records this process as the session's holder and returns undefined, or returns the live
   * holder of another process and records nothing. A dead holder's record (its process gone, or
   * its pid reused) is replaced; `takeover: true` replaces a live one; a holder in this same
   * process is replaced (a second runtime takes over, as the fence does).
   * Contract: counted per store object: each claim that returned undefined is matched by one `release`.
   */
  claim(sessionId: string, options: { takeover: boolean; workerId?: string }): Promise<SessionHolder | undefined>;
  /** Ends one claim; the last removes the record if it is still this store's (a takeover replaced it otherwise). */
  release(sessionId: string): Promise<void>;
  /**
   * Optional: the live holder recorded for the session (this process's included), read without
   * claiming or recording anything; undefined when none is recorded or its process is gone. A
   * reader such as `actorloop recover` names with it the process running the session.
   */
  holderOf?(sessionId: string): Promise<SessionHolder | undefined>;
}

/** State (field 3) and start time (field 22) of process `pid` from /proc/<pid>/stat; undefined without /proc or without the process. */
function procStat(pid: number): { state: string; startTime: string } | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // the command name (field 2) is in parentheses and may hold spaces or ')': fields 3.. follow the last ')'
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { state: rest[0]!, startTime: rest[22 - 3]! };
}

/**
 * The start time of process `pid` (field 22 of /proc/<pid>/stat, clock ticks after boot), or undefined
 * without /proc or without the process.
 */
export const processStartTime = (pid: number): string | undefined => procStat(pid)?.startTime;

let me: HolderRecord | undefined;

/** This process as a holder record (without a worker id). */
export function thisProcess(): HolderRecord {
  if (!me) {
    const startTime = processStartTime(process.pid);
    me = { host: hostname(), pid: process.pid, ...(startTime !== undefined ? { startTime } : {}) };
  }
  return me;
}

/**
 * Whether the process a record names is gone, checked on this machine only: its pid answers no
 * signal 0 (ESRCH), or (Linux) the process with that pid is a zombie or started at another time
 * (the pid was reused). Without /proc only the pid is checked.
 */
export function holderGone(h: HolderRecord): boolean {
  try {
    process.kill(h.pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ESRCH') return true;
    // EPERM: a process of another user has that pid; it lives
  }
  const now = procStat(h.pid);
  if (now === undefined) return h.startTime !== undefined && existsProc(); // gone since signal 0 answered (with /proc)
  // a zombie (killed, not yet reaped by its parent) writes nothing more
  return now.state === 'Z' || now.state === 'X' || (h.startTime !== undefined && now.startTime !== h.startTime);
}

/** With /proc mounted, a pid whose stat cannot be read has gone since signal 0 answered. */
const existsProc = (): boolean => procStat(process.pid) !== undefined;

/**
 * How a claim meets a recorded holder: `same-process` (this process: replaced, as a fence
 * replaces it), `dead` (replaced), `live` (refused unless takeover). `alive` answers for a holder
 * on another machine (the store's own liveness: a PostgreSQL lock) and, when given, must also
 * hold for one on this machine.
 */
export function judgeHolder(h: HolderRecord, alive?: boolean): 'same-process' | 'dead' | 'live' {
  const self = thisProcess();
  if (h.host === self.host) {
    if (h.pid === self.pid && h.startTime === self.startTime) return 'same-process';
    if (holderGone(h)) return 'dead';
  }
  if (alive === undefined) return 'live'; // another machine, and the store cannot tell: taken as live
  return alive ? 'live' : 'dead';
}

/** The holder as `SessionHeldError` reports it. */
export const publicHolder = (h: HolderRecord): SessionHolder => ({
  host: h.host,
  pid: h.pid,
  ...(h.workerId !== undefined ? { workerId: h.workerId } : {}),
});
