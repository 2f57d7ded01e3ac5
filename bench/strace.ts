/**
 * Counting disk syncs with strace (bench helpers): a case re-runs in a child process under
 * `strace -f`, between two marker files it opens, and the sync syscalls in that window are
 * counted — fdatasync / fsync / msync(MS_SYNC) calls and writes to descriptors opened with O_DSYNC
 * (how LMDB syncs its meta page).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fmt } from './table.js';

export interface SyncCount {
  ops: number;
  fdatasync: number;
  fsync: number;
  dsyncWrites: number;
  msync: number;
  /** Of all the syncs above, those issued by the process's main (JS) thread. */
  onJsThread: number;
}

export const TRACED = 'trace=openat,fdatasync,fsync,pwrite64,pwritev,pwritev2,write,writev,msync,sync_file_range';
export const MARK_START = 'STRACE-MARK-start';
export const MARK_END = 'STRACE-MARK-end';

export function straceAvailable(): boolean {
  const r = spawnSync('strace', ['-V'], { encoding: 'utf8' });
  return r.status === 0;
}

function childExecArgv(): string[] {
  return process.execArgv.some((a) => a.includes('tsx')) ? process.execArgv : ['--import', 'tsx'];
}

/**
 * Runs `script` with `args` in a child process under `strace -f`, and counts the sync syscalls
 * it makes between its two marker opens. The child prints `{ "pid": …, "ops": … }` as its last
 * stdout line. Returns a reason string when strace or the child fails.
 */
export function straceChildRun(script: string, args: string[], dir: string, cwd: string): SyncCount | string {
  mkdirSync(dir, { recursive: true });
  const out = join(dir, 'strace.txt');
  const r = spawnSync('strace', ['-f', '-o', out, '-e', TRACED, process.execPath, ...childExecArgv(), script, ...args], {
    encoding: 'utf8',
    timeout: 120_000,
    cwd,
  });
  if (r.error) return `strace failed: ${r.error.message}`;
  if (r.status !== 0) return `strace exit ${r.status}: ${(r.stderr || '').trim().split('\n')[0] ?? ''}`;
  const last = r.stdout.trim().split('\n').pop() ?? '';
  let info: { pid: number; ops: number };
  try {
    info = JSON.parse(last) as { pid: number; ops: number };
  } catch {
    return `unexpected child output: ${last.slice(0, 80)}`;
  }
  return parseStrace(readFileSync(out, 'utf8'), String(info.pid), info.ops);
}

/** Counts sync syscalls between the two marker opens (all threads of the child). */
export function parseStrace(text: string, mainPid: string, ops: number): SyncCount {
  const count: SyncCount = { ops, fdatasync: 0, fsync: 0, dsyncWrites: 0, msync: 0, onJsThread: 0 };
  const syncFds = new Set<string>();
  const pendingOpen = new Map<string, boolean>();
  let inWindow = false;
  const setFd = (fd: string | undefined, sync: boolean | undefined) => {
    if (fd === undefined) return;
    if (sync) syncFds.add(fd);
    else syncFds.delete(fd);
  };
  for (const line of text.split('\n')) {
    const m = /^(\d+)\s+(.*)$/.exec(line);
    if (!m) continue;
    const pid = m[1]!;
    const rest = m[2]!;
    if (rest.startsWith('openat(')) {
      if (rest.includes(MARK_START)) inWindow = true;
      if (rest.includes(MARK_END)) break;
      const sync = /\bO_(D)?SYNC\b/.test(rest);
      if (rest.includes('<unfinished')) pendingOpen.set(pid, sync);
      else setFd(/\)\s+=\s+(\d+)/.exec(rest)?.[1], sync);
      continue;
    }
    if (rest.startsWith('<... openat resumed>')) {
      setFd(/=\s+(\d+)/.exec(rest)?.[1], pendingOpen.get(pid));
      continue;
    }
    if (!inWindow) continue;
    const call = /^(\w+)\((\d+)?/.exec(rest);
    if (!call) continue;
    const [, name, fd] = call;
    let kind: 'fdatasync' | 'fsync' | 'msync' | 'dsyncWrites' | undefined;
    if (name === 'fdatasync' || name === 'fsync') kind = name;
    else if (name === 'msync' && rest.includes('MS_SYNC')) kind = 'msync';
    else if (name !== undefined && /^p?writev?(64|2)?$/.test(name) && fd !== undefined && syncFds.has(fd)) kind = 'dsyncWrites';
    if (kind === undefined) continue;
    count[kind]++;
    if (pid === mainPid) count.onJsThread++;
  }
  return count;
}

export const totalSyncs = (c: SyncCount) => c.fdatasync + c.fsync + c.dsyncWrites + c.msync;

export function syncCell(c: SyncCount | string | undefined): string {
  if (c === undefined) return '-';
  if (typeof c === 'string') return 'n/a';
  const per = (x: number) => fmt(x / c.ops, 2);
  return `${per(totalSyncs(c))} (${per(c.onJsThread)} JS thr)`;
}

export function syncDetail(c: SyncCount | string | undefined): string {
  if (c === undefined || typeof c === 'string') return '';
  const parts: string[] = [];
  const per = (x: number) => fmt(x / c.ops, 2);
  if (c.fdatasync) parts.push(`fdatasync ${per(c.fdatasync)}`);
  if (c.fsync) parts.push(`fsync ${per(c.fsync)}`);
  if (c.dsyncWrites) parts.push(`O_DSYNC write ${per(c.dsyncWrites)}`);
  if (c.msync) parts.push(`msync ${per(c.msync)}`);
  return parts.length ? `per op: ${parts.join(' + ')}` : 'no sync syscalls';
}
