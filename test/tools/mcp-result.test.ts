import { describe, expect, it } from 'vitest';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import type { JsonSchemaValidatorLike, McpToolInfo } from '../../src/tools/mcp-client.js';
import { callResultSchema, readResult } from '../../src/tools/mcp-result.js';

// readResult: what a tools/call response the server sent means (the call ran, whatever it holds).

const validator = new AjvJsonSchemaValidator();
const info = (outputSchema?: Record<string, unknown>): McpToolInfo => ({
  name: 'charge',
  inputSchema: { type: 'object' },
  ...(outputSchema ? { outputSchema } : {}),
});

describe('readResult', () => {
  it.each([
    ['content that is not an array', { content: 'charged' }, /content: .*expected array/],
    ['content that is an object', { content: { text: 'charged' } }, /content: .*expected array/],
    ['blocks that are not objects', { content: [null, 3, { type: 'text', text: 'charged' }] }, /content\.0: .*content\.1: /],
    ['a result that is not an object', null, /the result: .*expected object/],
  ])('a response with %s is read, never thrown: a completed result that says the call ran and names the misfit', async (_, raw, misfit) => {
    const outcome = readResult(info(), raw, validator, await callResultSchema());
    expect(outcome).toMatchObject({ kind: 'completed', isError: false });
    const content = String((outcome as { content: unknown }).content);
    expect(content).toMatch(/the call ran, but its result does not fit the MCP schema of a tool result/);
    expect(content).toMatch(misfit);
  });

  it("an older server's { toolResult } is read as the call's text (the schema's parse gives it an empty content)", async () => {
    const shape = await callResultSchema();
    expect(readResult(info(), { toolResult: 'legacy answer' }, validator, shape)).toMatchObject({
      kind: 'completed',
      content: 'legacy answer',
    });
    expect(readResult(info(), { toolResult: { total: 3 } }, validator, shape)).toMatchObject({ content: '{"total":3}' });
  });

  it('a validator that throws names the output schema as unchecked; the result is delivered', async () => {
    const throwing: JsonSchemaValidatorLike = {
      getValidator: () => () => {
        throw new Error('validator broke');
      },
    };
    const outcome = readResult(
      info({ type: 'object' }),
      { content: [{ type: 'text', text: 'charged' }], structuredContent: { id: 1 } },
      throwing,
      await callResultSchema(),
    );
    expect(outcome).toMatchObject({ kind: 'completed', isError: false, structured: { id: 1 } });
    expect(String((outcome as { content: unknown }).content)).toMatch(
      /^charged\n\(the call ran, but .*could not be checked.*validator broke/,
    );
  });

  it('an error result without structured content fits an output schema (as the SDK checks); a result that fits gets no note', async () => {
    const schema = { type: 'object', properties: { id: { type: 'string' } }, required: ['id'] };
    const shape = await callResultSchema();
    expect(readResult(info(schema), { content: [{ type: 'text', text: 'boom' }], isError: true }, validator, shape)).toEqual({
      kind: 'completed',
      content: 'boom',
      isError: true,
    });
    expect(readResult(info(schema), { content: [{ type: 'text', text: 'ok' }], structuredContent: { id: 'a' } }, validator, shape)).toEqual(
      {
        kind: 'completed',
        content: 'ok',
        isError: false,
        structured: { id: 'a' },
      },
    );
  });
});
