import { describe, expect, it } from 'vitest';
import { Progress } from '../../src/cli/progress.js';
import type { Envelope, LiveEvent } from '../../src/streams/envelopes.js';

const envelopes = (events: LiveEvent[]): Envelope[] => events.map((event, i) => ({ runId: 'r', attemptId: 'a', seq: i + 1, event }));

const retried: LiveEvent[] = [
  { type: 'message_start', role: 'assistant' },
  { type: 'message_delta', role: 'assistant', text: 'Hel' },
  {
    type: 'message_end',
    role: 'assistant',
    message: { role: 'assistant', content: 'Hel' },
    discarded: { reason: 'model attempt 1 failed: stream cut (retrying)' },
  },
  { type: 'message_start', role: 'assistant' },
  { type: 'message_delta', role: 'assistant', text: 'Hello' },
  { type: 'message_end', role: 'assistant', message: { role: 'assistant', content: 'Hello' } },
];

function render(tty: boolean): string {
  let out = '';
  const p = new Progress({ write: (t: string) => (out += t) }, { tty, color: false, modes: new Map() });
  for (const e of envelopes(retried)) p.onEnvelope(e);
  p.stop();
  return out;
}

describe('Progress (CLI rendering of envelopes)', () => {
  it('shows a discarded attempt as such, then the retried message (plain output)', () => {
    const out = render(false);
    expect(out).toContain('(discarded: model attempt 1 failed: stream cut (retrying))');
    expect(out).toContain('assistant: Hello\n');
    expect(out).not.toContain('assistant: Hel\n');
  });

  it('on a TTY, ends the streamed line before saying it was discarded', () => {
    const out = render(true);
    expect(out).toMatch(/assistant: Hel\n.*\(discarded: model attempt 1 failed/s);
    expect(out).toMatch(/assistant: Hello\n/);
  });
});
