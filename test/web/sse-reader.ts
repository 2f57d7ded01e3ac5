import { SseParser, type SseMessage } from '../../src/web/sse-parse.js';
import type { Frame } from '../../src/web/wire.js';
import { scaled } from '../helpers/load.js';

export interface ReadMessage extends SseMessage {
  frame: Frame;
}

/** Reads a stream Response's SSE messages as they come; `until` waits for a message matching it. */
export class SseReader {
  readonly messages: ReadMessage[] = [];
  readonly parser = new SseParser();
  ended = false;
  private readonly reader: ReadableStreamDefaultReader<string>;
  private waiters: (() => void)[] = [];
  readonly done: Promise<void>;

  constructor(res: Response) {
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    this.reader = reader;
    this.done = (async () => {
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          for (const m of this.parser.push(value)) this.messages.push({ ...m, frame: JSON.parse(m.data) as Frame });
          this.wake();
        }
      } catch {
        // cancelled
      } finally {
        this.ended = true;
        this.wake();
      }
    })();
  }

  private wake() {
    for (const w of this.waiters.splice(0)) w();
  }

  committed(): Extract<Frame, { kind: 'committed' }>[] {
    return this.messages.flatMap((m) => (m.frame.kind === 'committed' ? [m.frame] : []));
  }

  /** Resolves once `pred` holds (checked after each chunk); rejects after `quietMs` (load-scaled). */
  until(pred: (r: SseReader) => boolean, quietMs: number, what: string): Promise<void> {
    const ms = scaled(quietMs);
    return new Promise((res, rej) => {
      const timer = setTimeout(
        () =>
          rej(
            new Error(
              `timed out after ${ms} ms waiting for ${what}; got ${this.messages.map((m) => `${m.event}#${m.id ?? ''}`).join(' ')}`,
            ),
          ),
        ms,
      );
      const check = () => {
        if (pred(this)) {
          clearTimeout(timer);
          res();
        } else if (this.ended) {
          clearTimeout(timer);
          rej(new Error(`stream ended before ${what}; got ${this.messages.map((m) => `${m.event}#${m.id ?? ''}`).join(' ')}`));
        } else this.waiters.push(check);
      };
      check();
    });
  }

  async cancel(): Promise<void> {
    await this.reader.cancel().catch(() => undefined);
    await this.done;
  }
}
