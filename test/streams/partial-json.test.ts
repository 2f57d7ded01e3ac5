import { describe, expect, it } from 'vitest';
import { parsePartialJson } from '../../src/index.js';
import { unfencedJson } from '../../src/streams/partial-json.js';
import { checkOutput, outputSpec } from '../../src/actors/final-output.js';
import { z } from 'zod';

// parsePartialJson: a JSON text cut anywhere reads as the value it stands for so far.

describe('parsePartialJson', () => {
  it('closes open objects and arrays and keeps a string cut short', () => {
    expect(parsePartialJson('{"name":"Ac')).toEqual({ name: 'Ac' });
    expect(parsePartialJson('{"items":[1,2')).toEqual({ items: [1, 2] });
    expect(parsePartialJson('{"a":{"b":[{"c":"x"}, {"d"')).toEqual({ a: { b: [{ c: 'x' }, {}] } });
    expect(parsePartialJson('[{"a":1},')).toEqual([{ a: 1 }]);
  });

  it('leaves out a key cut short, a key without its value and a literal cut short', () => {
    expect(parsePartialJson('{"done":true,"na')).toEqual({ done: true });
    expect(parsePartialJson('{"done":true,"name":')).toEqual({ done: true });
    expect(parsePartialJson('{"done":tr')).toEqual({});
    expect(parsePartialJson('{"x":nul')).toEqual({});
    expect(parsePartialJson('{"n":-')).toEqual({});
  });

  it('reads numbers as far as they go and escapes, leaving out a half-written escape', () => {
    expect(parsePartialJson('{"n":12')).toEqual({ n: 12 });
    expect(parsePartialJson('{"n":1.5e')).toEqual({ n: 1.5 });
    expect(parsePartialJson('{"s":"a\\nb\\u00e9')).toEqual({ s: 'a\nbé' });
    expect(parsePartialJson('{"s":"a\\')).toEqual({ s: 'a' });
    expect(parsePartialJson('{"s":"a\\u00')).toEqual({ s: 'a' });
  });

  it('is undefined before a value begins, for prose, and for anything after a whole value', () => {
    expect(parsePartialJson('')).toBeUndefined();
    expect(parsePartialJson('   ')).toBeUndefined();
    expect(parsePartialJson('Here is')).toBeUndefined();
    expect(parsePartialJson('{"a":1} and more')).toBeUndefined();
    expect(parsePartialJson('{"a" 1}')).toBeUndefined();
  });

  it('skips a Markdown code fence around the JSON', () => {
    expect(parsePartialJson('```json\n{"a":[1')).toEqual({ a: [1] });
    expect(parsePartialJson('```json\n{"a":1}\n```')).toEqual({ a: 1 });
  });

  it('keeps a key named __proto__ as an own property, never the prototype', () => {
    const v = parsePartialJson('{"__proto__":{"polluted":true},"a":1') as Record<string, unknown>;
    expect(Object.hasOwn(v, '__proto__')).toBe(true);
    expect(v.a).toBe(1);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.getPrototypeOf(v)).toBe(Object.prototype);
  });

  it('reads a whole JSON text as JSON.parse does', () => {
    const text = JSON.stringify({ a: [1, 'two', { three: null, four: false }], b: 'x"y\\z', c: -0.25 });
    expect(parsePartialJson(text)).toEqual(JSON.parse(text));
  });
});

describe('unfencedJson', () => {
  it('the final check and the partial objects read a fenced answer alike, a one-line fence included', () => {
    const oneLine = '```json {"total": 12}```';
    expect(JSON.parse(unfencedJson(oneLine))).toEqual({ total: 12 });
    expect(parsePartialJson(oneLine)).toEqual({ total: 12 });
    expect(JSON.parse(unfencedJson('```json\n{"total": 12}\n```'))).toEqual({ total: 12 });
    expect(parsePartialJson('```json\n{"tot')).toEqual({});
    expect(checkOutput(outputSpec(z.object({ total: z.number() })), oneLine)).toEqual({ ok: true, value: { total: 12 } });
  });
});
