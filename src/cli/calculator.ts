/**
 * A small arithmetic evaluator for the demo's calculator tool: numbers, + - * / % ^, parentheses,
 * unary minus. No `eval`, no identifiers: anything else is a clear error the model can read.
 */

type Token = { kind: 'num'; value: number } | { kind: 'op'; value: string };

function tokenize(src: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i]!;
    if (c === ' ' || c === '\t') {
      i++;
      continue;
    }
    const num = /^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?/.exec(src.slice(i));
    if (num) {
      tokens.push({ kind: 'num', value: Number(num[0]) });
      i += num[0].length;
      continue;
    }
    if ('+-*/%^()'.includes(c)) {
      tokens.push({ kind: 'op', value: c });
      i++;
      continue;
    }
    throw new Error(`unexpected ${JSON.stringify(c)} at position ${i + 1}: only numbers, + - * / % ^ and parentheses are allowed`);
  }
  return tokens;
}

/**
 * Evaluates an arithmetic expression. Throws an Error with a readable message for bad input,
 * division by zero or a non-finite result.
 * @example
 * evaluate('(1 - 0.999) * 30 * 24 * 60') // 43.2 (to floating-point precision)
 */
export function evaluate(expression: string): number {
  if (expression.length > 500) throw new Error('expression is too long (500 characters at most)');
  const tokens = tokenize(expression);
  let pos = 0;
  const peek = () => tokens[pos];
  const isOp = (v: string) => {
    const t = peek();
    return t?.kind === 'op' && t.value === v;
  };

  // expr := term (('+'|'-') term)* ; term := unary (('*'|'/'|'%') unary)* ;
  // unary := '-' unary | power ; power := atom ('^' unary)?
  const expr = (): number => {
    let v = term();
    while (isOp('+') || isOp('-')) {
      const op = (tokens[pos++] as { value: string }).value;
      const r = term();
      v = op === '+' ? v + r : v - r;
    }
    return v;
  };
  const term = (): number => {
    let v = unary();
    while (isOp('*') || isOp('/') || isOp('%')) {
      const op = (tokens[pos++] as { value: string }).value;
      const r = unary();
      if ((op === '/' || op === '%') && r === 0) throw new Error('division by zero');
      v = op === '*' ? v * r : op === '/' ? v / r : v % r;
    }
    return v;
  };
  const unary = (): number => {
    if (isOp('-')) {
      pos++;
      return -unary();
    }
    if (isOp('+')) {
      pos++;
      return unary();
    }
    return power();
  };
  const power = (): number => {
    const base = atom();
    if (isOp('^')) {
      pos++;
      return base ** unary();
    }
    return base;
  };
  const atom = (): number => {
    const t = tokens[pos++];
    if (!t) throw new Error('the expression ends too early');
    if (t.kind === 'num') return t.value;
    if (t.value === '(') {
      const v = expr();
      if (!isOp(')')) throw new Error('missing )');
      pos++;
      return v;
    }
    throw new Error(`unexpected ${JSON.stringify(t.value)}`);
  };

  if (tokens.length === 0) throw new Error('empty expression');
  const value = expr();
  if (pos < tokens.length) throw new Error(`unexpected ${JSON.stringify((tokens[pos] as Token).value)} after the end of the expression`);
  if (!Number.isFinite(value)) throw new Error('the result is not a finite number');
  return value;
}

/** Formats a result without floating-point noise (43.199999999999996 → 43.2). */
export function formatNumber(n: number): string {
  return String(Number(n.toPrecision(12)));
}
