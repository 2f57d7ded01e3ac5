// Outside names are never keys of plain objects (docs/STYLE: `o.resources?.[toolName]` with a tool
// named `__proto__` or `constructor`). This rule reports a computed access `obj[key]` and a
// `key in obj` where `key` is typed as any string (not a union of literals) and `obj` is a plain
// object with a string index signature (a `Record<string, T>`, not an array, a tuple or a Map).
// Such a read returns Object.prototype's members for `constructor`, `toString`, `__proto__`, and
// such a write can replace the prototype. Use a Map, or check `Object.hasOwn(obj, key)` first
// (an access guarded by `Object.hasOwn(obj, key) &&` or `? :` on the same object and key passes).
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

const text = (source, node) => source.getText(node).replace(/\?\./g, '.').replace(/\s+/g, '');

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
      access: 'A string key on a plain object reaches Object.prototype (`constructor`, `__proto__`): use a Map or check Object.hasOwn first.',
      in: '`key in obj` is true for Object.prototype\'s names (`constructor`, `toString`): use Object.hasOwn(obj, key) or a Map.',
    },
    schema: [],
  },
  create(context) {
    const services = context.sourceCode.parserServices;
    if (!services?.program) throw new Error('no-outside-key needs type information (parserOptions.projectService)');
    const checker = services.program.getTypeChecker();
    const source = context.sourceCode;
    const typeOf = (node) => services.getTypeAtLocation(node);
    return {
      MemberExpression(node) {
        if (!node.computed || node.property.type === 'Literal') return;
        if (!isStringish(checker, typeOf(node.property))) return;
        if (!hasStringIndex(checker, checker.getNonNullableType(typeOf(node.object)))) return;
        if (guardedByHasOwn(source, node, node.object, node.property)) return;
        context.report({ node, messageId: 'access' });
      },
      BinaryExpression(node) {
        if (node.operator !== 'in' || node.left.type === 'Literal' || node.left.type === 'PrivateIdentifier') return;
        if (!isStringish(checker, typeOf(node.left))) return;
        if (!hasStringIndex(checker, checker.getNonNullableType(typeOf(node.right)))) return;
        context.report({ node, messageId: 'in' });
      },
    };
  },
};
