import { spawn } from 'node:child_process';
import { hostname } from 'node:os';
import { describe, expect, it } from 'vitest';
import { judgeHolder, processStartTime } from '../../src/persistence/holders.js';

// How a recorded holder is judged on this machine (docs/guarantees.md, "One live writer"): by the
// process table, with the process's start time telling a reused pid from the holder.

describe.runIf(process.platform === 'linux')('judging a recorded holder (Linux)', () => {
  it('a live process with the recorded start time is live; the same pid with another start time is a reused pid: dead', async () => {
    const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
    try {
      const pid = child.pid!;
      const startTime = processStartTime(pid);
      expect(startTime).toMatch(/^\d+$/);
      expect(judgeHolder({ host: hostname(), pid, startTime })).toBe('live');
      expect(judgeHolder({ host: hostname(), pid, startTime: String(Number(startTime) - 1) })).toBe('dead');
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
      expect(judgeHolder({ host: hostname(), pid, startTime })).toBe('dead');
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('this process is same-process; a holder on another host is taken as live unless the store says otherwise', () => {
    const startTime = processStartTime(process.pid)!;
    expect(judgeHolder({ host: hostname(), pid: process.pid, startTime })).toBe('same-process');
    expect(judgeHolder({ host: `not-${hostname()}`, pid: 1 })).toBe('live');
    expect(judgeHolder({ host: `not-${hostname()}`, pid: 1 }, false)).toBe('dead');
  });
});
