import { contentDisplay } from '../contracts/content.js';
import type { Envelope } from '../streams/envelopes.js';
import { clip, outcomeSummary } from './format.js';

/** Where the CLI writes: stdout in real use, a buffer in tests. */
export interface Sink {
  write(text: string): unknown;
  isTTY?: boolean;
}

/** ANSI styling, off unless `on`. */
export function styles(on: boolean) {
  const wrap = (code: string) => (s: string) => (on ? `\x1b[${code}m${s}\x1b[0m` : s);
  return { dim: wrap('2'), bold: wrap('1'), red: wrap('31'), green: wrap('32'), yellow: wrap('33'), cyan: wrap('36'), magenta: wrap('35') };
}

const SPINNER = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

interface Running {
  name: string;
  since: number;
  note?: string;
}

/**
 * Renders a session's envelopes as it runs. On a TTY: streamed text as it arrives and one
 * refreshed status line (what runs, for how long); otherwise plain, stable lines, one per event
 * worth a line (every tool start has one: `tool start <name> <callId> [mode] <args>`).
 */
export class Progress {
  private readonly s: ReturnType<typeof styles>;
  private readonly running = new Map<string, Running>();
  private status = '';
  private streaming = false;
  private streamed = '';
  private waitingSince: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private frame = 0;

  constructor(
    private readonly out: Sink,
    private readonly opts: { tty: boolean; color: boolean; modes: ReadonlyMap<string, string> },
  ) {
    this.s = styles(opts.color);
    if (opts.tty) this.timer = setInterval(() => this.redraw(), 100).unref();
  }

  /** Prints a permanent line (above the status line on a TTY). */
  line(text: string): void {
    this.clearStatus();
    if (this.streaming) {
      this.out.write('\n');
      this.streaming = false;
    }
    this.out.write(`${text}\n`);
    this.redraw();
  }

  onEnvelope(env: Envelope): void {
    const e = env.event;
    const { dim, cyan, bold } = this.s;
    switch (e.type) {
      case 'run_start':
        this.line(`${bold(`run ${e.runId}`)} turn ${e.turn}: attempt ${e.attemptId} ${dim(`(run epoch ${e.runEpoch})`)}`);
        break;
      case 'step_start':
        this.line(bold(`step ${e.step}`));
        this.waitingSince = Date.now();
        break;
      case 'rate_limit_wait':
        this.line(
          e.state === 'waiting'
            ? `  ${dim(`waiting for the rate limit ${e.limit}${e.ahead ? ` (${e.ahead} calls ahead)` : ''}`)}`
            : `  ${dim(`rate limit granted after ${((e.waitedMs ?? 0) / 1000).toFixed(1)} s`)}`,
        );
        break;
      case 'message_delta':
        if (!this.opts.tty) {
          this.streamed += e.text;
          break;
        }
        if (!this.streaming) {
          this.clearStatus();
          this.out.write(`  ${cyan('assistant')}: `);
          this.streaming = true;
          this.waitingSince = undefined;
        }
        this.out.write(e.text);
        break;
      case 'message_end': {
        if (e.discarded) {
          if (this.streaming) this.out.write('\n');
          this.streaming = false;
          this.streamed = '';
          this.line(`  ${dim(`(discarded: ${e.discarded.reason})`)}`);
          break;
        }
        const took = this.waitingSince ? ` ${dim(`(${((Date.now() - this.waitingSince) / 1000).toFixed(1)} s)`)}` : '';
        this.waitingSince = undefined;
        if (this.streaming) {
          this.out.write('\n');
          this.streaming = false;
        } else if (e.message.content) {
          this.line(`  ${cyan('assistant')}: ${contentDisplay(e.message.content)}`);
        }
        this.streamed = '';
        const calls = e.message.toolCalls ?? [];
        if (calls.length)
          this.line(
            `  model asks for ${calls.length} tool call${calls.length > 1 ? 's' : ''}: ${calls.map((c) => c.name).join(', ')}${took}`,
          );
        break;
      }
      case 'tool_start':
        this.running.set(e.callId, { name: e.name, since: Date.now() });
        this.line(
          `  tool start ${cyan(e.name)} ${dim(e.callId)} [${this.opts.modes.get(e.name) ?? '?'}] ` +
            `${dim(clip(JSON.stringify(e.arguments), 70))}`,
        );
        break;
      case 'tool_update': {
        const r = this.running.get(e.callId);
        const note = clip(typeof e.update === 'string' ? e.update : Object.values(e.update as object).join(' '), 40);
        if (r) r.note = note;
        if (!this.opts.tty) this.line(`  tool update ${e.name} ${e.callId}: ${note}`);
        break;
      }
      case 'tool_end': {
        this.running.delete(e.callId);
        this.line(`  tool end   ${cyan(e.name)} ${dim(e.callId)} ${this.colourOutcome(outcomeSummary(e.outcome, 70), e.outcome.kind)}`);
        break;
      }
      case 'approval_requested':
      case 'question_asked':
        this.line(`  ${this.s.yellow('waiting for an answer')}: ${clip(JSON.stringify(e.pendingRequest), 100)}`);
        break;
      default:
        break;
    }
  }

  private colourOutcome(text: string, kind: string): string {
    if (text.startsWith('error')) return this.s.red(text);
    if (kind === 'completed') return this.s.green(text);
    return this.s.yellow(text);
  }

  /** Stops the status line's refresh. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.clearStatus();
    if (this.streaming) this.out.write('\n');
    this.streaming = false;
  }

  private clearStatus(): void {
    if (this.opts.tty && this.status) this.out.write('\r\x1b[K');
    this.status = '';
  }

  private redraw(): void {
    if (!this.opts.tty || this.streaming || !this.timer) return;
    const now = Date.now();
    const parts = [...this.running.values()].map(
      (r) => `${r.name}${r.note ? ` (${r.note})` : ''} ${((now - r.since) / 1000).toFixed(1)} s`,
    );
    if (parts.length === 0 && this.waitingSince !== undefined)
      parts.push(`waiting for the model ${((now - this.waitingSince) / 1000).toFixed(1)} s`);
    if (parts.length === 0) return this.clearStatus();
    const text = `${SPINNER[this.frame++ % SPINNER.length]} ${parts.join(' · ')}`;
    this.out.write(`\r\x1b[K${this.s.dim(clip(text, Math.max(20, (process.stdout.columns || 100) - 2)))}`);
    this.status = text;
  }
}
