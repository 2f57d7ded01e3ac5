/**
 * A server-sent-events parser (the WHATWG rules: `event:`, `data:` lines joined by newlines,
 * `id:`, `retry:`, comments, CR/LF/CRLF line ends), fed text chunks as they arrive.
 * Browser-safe: no Node import.
 * @example
 * const parser = new SseParser()
 * for (const msg of parser.push('event: ready\ndata: {}\n\n')) console.log(msg.event, msg.data)
 */
export interface SseMessage {
  event: string;
  data: string;
  /** The message's `id:`, when it had one. */
  id?: string;
}

export class SseParser {
  private buffer = '';
  private event = '';
  private data: string[] = [];
  private id: string | undefined;
  /** The last `retry:` value received, in ms. */
  retryMs: number | undefined;
  /** Comment lines received (heartbeats). */
  comments = 0;

  /** Parses a chunk; returns the messages it completed. */
  push(chunk: string): SseMessage[] {
    this.buffer += chunk;
    const out: SseMessage[] = [];
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buffer);
      if (!m) break;
      // a lone CR at the chunk's end may be the first half of CRLF
      if (m[0] === '\r' && m.index === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, m.index);
      this.buffer = this.buffer.slice(m.index + m[0].length);
      const msg = this.line(line);
      if (msg) out.push(msg);
    }
    return out;
  }

  private line(line: string): SseMessage | undefined {
    if (line === '') {
      if (this.data.length === 0) {
        this.event = '';
        this.id = undefined;
        return undefined;
      }
      const msg: SseMessage = {
        event: this.event || 'message',
        data: this.data.join('\n'),
        ...(this.id !== undefined ? { id: this.id } : {}),
      };
      this.event = '';
      this.data = [];
      this.id = undefined;
      return msg;
    }
    if (line.startsWith(':')) {
      this.comments++;
      return undefined;
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') this.event = value;
    else if (field === 'data') this.data.push(value);
    else if (field === 'id' && !value.includes('\0')) this.id = value;
    else if (field === 'retry' && /^\d+$/.test(value)) this.retryMs = Number(value);
    return undefined;
  }
}
