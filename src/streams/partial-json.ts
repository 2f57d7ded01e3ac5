/** The text ended before a value of it began (or while a literal was half written). */
const EOF = Symbol('eof');

class Invalid extends Error {}

const ESCAPES: ReadonlyMap<string, string> = new Map([
  ['"', '"'],
  ['\\', '\\'],
  ['/', '/'],
  ['b', '\b'],
  ['f', '\f'],
  ['n', '\n'],
  ['r', '\r'],
  ['t', '\t'],
]);

/** A tolerant reader of a JSON text cut anywhere: what is there so far, closed where it stops. */
class PartialReader {
  private i = 0;
  constructor(private readonly s: string) {}

  private ws(): void {
    while (this.i < this.s.length && ' \t\n\r'.includes(this.s[this.i]!)) this.i++;
  }

  private atEnd(): boolean {
    this.ws();
    return this.i >= this.s.length;
  }

  /** A value, partial where the text stops (a string cut short, an open object or array); EOF if none began. */
  value(): unknown {
    if (this.atEnd()) throw EOF;
    const c = this.s[this.i]!;
    if (c === '{') return this.object();
    if (c === '[') return this.array();
    if (c === '"') return this.string();
    if (c === '-' || (c >= '0' && c <= '9')) return this.number();
    for (const [word, v] of [
      ['true', true],
      ['false', false],
      ['null', null],
    ] as const) {
      const rest = this.s.slice(this.i, this.i + word.length);
      if (rest === word) {
        this.i += word.length;
        return v;
      }
      if (word.startsWith(rest) && this.i + rest.length === this.s.length) {
        this.i = this.s.length; // `tru` at the end: read, no value yet
        throw EOF;
      }
    }
    throw new Invalid(`unexpected ${c}`);
  }

  private object(): Record<string, unknown> {
    this.i++; // {
    const out: Record<string, unknown> = {};
    for (;;) {
      if (this.atEnd()) return out;
      if (this.s[this.i] === '}') {
        this.i++;
        return out;
      }
      if (this.s[this.i] === ',') {
        this.i++;
        continue;
      }
      if (this.s[this.i] !== '"') throw new Invalid('expected a key');
      const start = this.i;
      const key = this.string();
      if (this.s[this.i - 1] !== '"' || this.i - 1 === start) return out; // the key itself was cut short
      if (this.atEnd()) return out;
      if (this.s[this.i] !== ':') throw new Invalid('expected :');
      this.i++;
      try {
        // a JSON key is outside data: defined as an own property, so `__proto__` is a key like any other
        Object.defineProperty(out, key, { value: this.value(), enumerable: true, writable: true, configurable: true });
      } catch (e) {
        if (e === EOF) return out;
        throw e;
      }
    }
  }

  private array(): unknown[] {
    this.i++; // [
    const out: unknown[] = [];
    for (;;) {
      if (this.atEnd()) return out;
      if (this.s[this.i] === ']') {
        this.i++;
        return out;
      }
      if (this.s[this.i] === ',') {
        this.i++;
        continue;
      }
      try {
        out.push(this.value());
      } catch (e) {
        if (e === EOF) return out;
        throw e;
      }
    }
  }

  /** A string, up to where the text stops (a half-written escape left out). */
  private string(): string {
    this.i++; // "
    let out = '';
    while (this.i < this.s.length) {
      const c = this.s[this.i++]!;
      if (c === '"') return out;
      if (c !== '\\') {
        out += c;
        continue;
      }
      if (this.i >= this.s.length) return out;
      const e = this.s[this.i++]!;
      if (e === 'u') {
        const hex = this.s.slice(this.i, this.i + 4);
        if (hex.length < 4) {
          this.i = this.s.length;
          return out;
        }
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) throw new Invalid('bad \\u escape');
        out += String.fromCharCode(parseInt(hex, 16));
        this.i += 4;
      } else {
        const v = ESCAPES.get(e);
        if (v === undefined) throw new Invalid(`bad escape \\${e}`);
        out += v;
      }
    }
    return out;
  }

  private number(): number {
    const m = /^-?(0|[1-9]\d*)?(\.\d*)?([eE][+-]?\d*)?/.exec(this.s.slice(this.i))!;
    this.i += m[0].length;
    const n = Number.parseFloat(m[0]);
    if (Number.isNaN(n)) {
      if (this.i >= this.s.length) throw EOF; // a lone `-` at the end
      throw new Invalid('bad number');
    }
    return n;
  }

  /** The whole text read: only whitespace may follow the value. */
  done(): boolean {
    return this.atEnd();
  }
}

/**
 * The value a JSON text cut anywhere stands for so far: open objects and arrays closed, a string
 * cut short kept as far as it goes, a key or literal (`tru`) cut short left out. Undefined when
 * no value began yet, or the text is not the start of a JSON text (prose, a second value). A
 * Markdown code fence opening the text is skipped.
 * @example
 * parsePartialJson('{"name":"Ac') // { name: 'Ac' }
 * parsePartialJson('{"items":[1,2') // { items: [1, 2] }
 */
export function parsePartialJson(text: string): unknown {
  const r = new PartialReader(unfencedJson(text));
  try {
    const v = r.value();
    return r.done() ? v : undefined;
  } catch (e) {
    if (e === EOF || e instanceof Invalid) return undefined;
    throw e;
  }
}

/**
 * A JSON text without the Markdown code fence a model may wrap it in (an opening one is removed
 * even while the closing one has not streamed yet). The final check and the partial objects read
 * the same text.
 * @example
 * unfencedJson('```json\n{"a":1}\n```') // '{"a":1}'
 */
export function unfencedJson(text: string): string {
  return text.replace(/^\s*```(?:json)?\s*\n?/, '').replace(/\n?```\s*$/, '');
}
