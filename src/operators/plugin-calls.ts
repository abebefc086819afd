// The plugin operator calls one execute decision needs, worked out before the policy runs. Plugin
// operators are evaluated in a worker with a time budget (sandbox.ts), which is asynchronous, while
// the wasm policy asks `agentgate.operator(name, operand, actual)` synchronously. So agentgate asks
// the worker first, for exactly the calls the shipped policy makes (rego: `violates(op, ...)` for a
// non-built-in op of a grant's constraint object, with the argument or null), and the builtin then
// answers from those results. A call nobody asked the worker about answers false: fail closed.
import type { Constraints } from '../domain/types.ts';

export interface PluginCall {
  name: string;
  operand: unknown;
  /** The argument's value, or null when it is missing (as the policy passes it). */
  actual: unknown;
  /**
   * The grants whose constraints make this call (one call can serve several grants of the agent).
   * An overrun trips them (trips.ts); the call is skipped only while every one of them is tripped.
   */
  grantIds: string[];
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * The distinct plugin calls the policy will make for these grants and arguments. Bounded by the
 * grant caps (DESIGN §6 limits): grants per capability x constrained fields x operators per field.
 */
export function pluginCalls(
  grants: ReadonlyArray<{ id: string; constraints?: Constraints | null | undefined }>,
  args: Record<string, unknown>,
  isPlugin: (name: string) => boolean,
): PluginCall[] {
  // Made at the first plugin operator: execute asks on every call, and most grants use none. The
  // loops are for...in with an own-property check, which visit what Object.entries would, in the
  // same order, without building arrays of pairs.
  let calls: Map<string, PluginCall> | undefined;
  for (const grant of grants) {
    const constraints = grant.constraints;
    if (!isPlainObject(constraints)) continue;
    for (const field in constraints) {
      if (!Object.hasOwn(constraints, field)) continue;
      const constraint = constraints[field];
      if (!isPlainObject(constraint)) continue;
      for (const name in constraint) {
        if (!Object.hasOwn(constraint, name) || !isPlugin(name)) continue;
        const operand = constraint[name];
        const actual = Object.hasOwn(args, field) ? args[field] : null;
        const key = callKey(name, operand, actual);
        calls ??= new Map();
        const known = calls.get(key);
        if (!known) calls.set(key, { name, operand, actual, grantIds: [grant.id] });
        else if (!known.grantIds.includes(grant.id)) known.grantIds.push(grant.id);
      }
    }
  }
  return calls === undefined ? [] : [...calls.values()];
}

/**
 * An evaluator for the policy's builtin (the policy engine's OperatorEvaluator: the same shape,
 * named there, since operators know nothing of the policy) that answers only the given calls from
 * their results.
 */
export function answersFor(calls: readonly PluginCall[], allowed: readonly boolean[]): (name: string, operand: unknown, actual: unknown) => boolean {
  const answers = new Map<string, boolean>();
  calls.forEach((call, i) => answers.set(callKey(call.name, call.operand, call.actual), allowed[i] === true));
  return (name, operand, actual) => answers.get(callKey(name, operand, actual)) === true;
}

/**
 * One string per (name, operand, actual), equal for equal JSON values whatever their key order: the
 * policy hands values back after a trip through wasm, which sorts object keys.
 */
function callKey(name: string, operand: unknown, actual: unknown): string {
  return canonicalJson([name, operand, actual]);
}

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (isPlainObject(value)) {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}
