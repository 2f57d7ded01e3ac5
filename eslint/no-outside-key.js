// Outside names are never keys of plain objects (the style guide: `o.resources?.[toolName]` with a
// tool named `__proto__` or `constructor`). This rule reports a computed access `obj[key]` and a
// `key in obj` where `key` is typed as any string (not a union of literals) and `obj` is a plain
// object with a string index signature (a `Record<string, T>`, not an array, a tuple or a Map).
// Such a read returns Object.prototype's members for `constructor`, `toString`, `__proto__`, and
// such a write can replace the prototype. Use a Map, or check `Object.hasOwn(obj, key)` first.
// Passes: an access guarded by `Object.hasOwn(obj, key) &&`, `? :` or `if` on the same object and
// key; a key that is one of the object's own keys (`for (const k of Object.keys(obj))`,
// `for (const [k] of Object.entries(obj))`, `Object.keys(obj).map((k) => …)`); an object made
// without a prototype in a `const` (`Object.create(null)`, `ownRecord(…)`); `process.env`.
import ts from 'typescript';

const isStringish = (checker, type) => {
  if (type.isUnion()) return type.types.some((t) => isStringish(checker, t));
  if (type.flags & (ts.TypeFlags.String | ts.TypeFlags.Any)) return true;
  if (type.flags & ts.TypeFlags.TemplateLiteral) return true;
  return false;
};

const hasStringIndex = (checker, type) => {
  const parts = type.isUnion() ? type.types : [type];
  return parts.some((t) => {
    if (checker.isArrayType(t) || checker.isTupleType(t)) return false;
    if (t.flags & (ts.TypeFlags.Any | ts.TypeFlags.Unknown)) return false;
    return checker.getIndexInfosOfType(t).some((info) => info.keyType.flags & ts.TypeFlags.String);
  });
};

const unwrap = (node) => {
  while (node && ['TSAsExpression', 'TSNonNullExpression', 'TSTypeAssertion', 'TSSatisfiesExpression'].includes(node.type))
    node = node.expression;
  return node;
};
const text = (source, node) => source.getText(unwrap(node)).replace(/\?\./g, '.').replace(/\s+/g, '');
const isCall = (node, callee, source) => node?.type === 'CallExpression' && text(source, node.callee) === callee;

function variableOf(source, id) {
  for (let scope = source.getScope(id); scope; scope = scope.upper) {
    const v = scope.set.get(id.name);
    if (v) return v;
  }
  return undefined;
}

/** Where a list of keys comes from: through `.filter()`, `.sort()`, `.slice()` and a `const` holding it. */
function keysSource(source, node) {
  for (let over = unwrap(node), seen = 0; seen < 8; seen++) {
    if (
      over.type === 'CallExpression' &&
      over.callee.type === 'MemberExpression' &&
      ['filter', 'sort', 'slice'].includes(over.callee.property.name)
    ) {
      over = unwrap(over.callee.object);
    } else if (over.type === 'Identifier') {
      const def = variableOf(source, over)?.defs[0];
      if (def?.type !== 'Variable' || def.parent.kind !== 'const' || !def.node.init) return over;
      over = unwrap(def.node.init);
    } else return over;
  }
  return node;
}

/** `key` is an own key of `obj`: a loop or callback variable over Object.keys(obj) / Object.entries(obj). */
function isOwnKeyOf(source, keyNode, objNode) {
  const key = unwrap(keyNode);
  if (key.type !== 'Identifier') return false;
  const def = variableOf(source, key)?.defs[0];
  if (!def) return false;
  const sameObject = (call) => call.arguments.length === 1 && text(source, call.arguments[0]) === text(source, objNode);
  if (def.type === 'Variable' && def.parent.parent?.type === 'ForOfStatement' && def.parent.parent.left === def.parent) {
    const over = keysSource(source, def.parent.parent.right);
    const id = def.node.id;
    if (id.type === 'Identifier' && isCall(over, 'Object.keys', source)) return sameObject(over);
    if (id.type === 'ArrayPattern' && id.elements[0] === def.name && isCall(over, 'Object.entries', source)) return sameObject(over);
    return false;
  }
  if (def.type === 'Parameter' && def.node.params[0] === def.name) {
    const call = def.node.parent;
    if (call?.type !== 'CallExpression' || call.arguments[0] !== def.node || call.callee.type !== 'MemberExpression') return false;
    const over = keysSource(source, call.callee.object);
    return isCall(over, 'Object.keys', source) && sameObject(over);
  }
  return false;
}

/** `obj` is a `const` made without a prototype: Object.create(null) or one of `factories`. */
function isPrototypeless(source, objNode, factories) {
  const obj = unwrap(objNode);
  if (text(source, obj) === 'process.env') return true;
  if (obj.type !== 'Identifier') return false;
  const def = variableOf(source, obj)?.defs[0];
  if (def?.type !== 'Variable' || def.parent.kind !== 'const') return false;
  const init = unwrap(def.node.init);
  if (init?.type !== 'CallExpression') return false;
  const callee = text(source, init.callee);
  return (
    (callee === 'Object.create' && init.arguments[0]?.type === 'Literal' && init.arguments[0].value === null) || factories.includes(callee)
  );
}

/** `Object.hasOwn(obj, key)` (or `Object.prototype.hasOwnProperty.call`) on an enclosing `&&`, `? :` or `if`. */
function guardedByHasOwn(source, node, objNode, keyNode) {
  const want = `${text(source, objNode)},${text(source, keyNode)}`;
  const isGuard = (test) => {
    if (!test) return false;
    if (test.type === 'LogicalExpression' && test.operator === '&&') return isGuard(test.left) || isGuard(test.right);
    if (test.type !== 'CallExpression' || test.arguments.length !== 2) return false;
    const callee = text(source, test.callee);
    if (callee !== 'Object.hasOwn' && callee !== 'Object.prototype.hasOwnProperty.call') return false;
    return `${text(source, test.arguments[0])},${text(source, test.arguments[1])}` === want;
  };
  for (let child = node, p = node.parent; p; child = p, p = p.parent) {
    if (p.type === 'LogicalExpression' && p.operator === '&&' && p.right === child && isGuard(p.left)) return true;
    if ((p.type === 'ConditionalExpression' || p.type === 'IfStatement') && p.consequent === child && isGuard(p.test)) return true;
    if (p.type.startsWith('Function') || p.type === 'ArrowFunctionExpression') return false;
  }
  return false;
}

export const noOutsideKey = {
  meta: {
    type: 'problem',
    messages: {
      access:
        'A string key on a plain object reaches Object.prototype (`constructor`, `__proto__`): use a Map or check Object.hasOwn first.',
      in: "`key in obj` is true for Object.prototype's names (`constructor`, `toString`): use Object.hasOwn(obj, key) or a Map.",
    },
    schema: [
      { type: 'object', properties: { prototypelessFactories: { type: 'array', items: { type: 'string' } } }, additionalProperties: false },
    ],
  },
  create(context) {
    const services = context.sourceCode.parserServices;
    if (!services?.program) throw new Error('no-outside-key needs type information (parserOptions.projectService)');
    const checker = services.program.getTypeChecker();
    const source = context.sourceCode;
    const typeOf = (node) => services.getTypeAtLocation(node);
    const factories = context.options[0]?.prototypelessFactories ?? [];
    return {
      MemberExpression(node) {
        if (!node.computed || node.property.type === 'Literal') return;
        if (!isStringish(checker, typeOf(node.property))) return;
        if (!hasStringIndex(checker, checker.getNonNullableType(typeOf(node.object)))) return;
        if (guardedByHasOwn(source, node, node.object, node.property)) return;
        if (isOwnKeyOf(source, node.property, node.object) || isPrototypeless(source, node.object, factories)) return;
        context.report({ node, messageId: 'access' });
      },
      BinaryExpression(node) {
        if (node.operator !== 'in' || node.left.type === 'Literal' || node.left.type === 'PrivateIdentifier') return;
        if (!isStringish(checker, typeOf(node.left))) return;
        if (!hasStringIndex(checker, checker.getNonNullableType(typeOf(node.right)))) return;
        if (isPrototypeless(source, node.right, factories)) return;
        context.report({ node, messageId: 'in' });
      },
    };
  },
};
