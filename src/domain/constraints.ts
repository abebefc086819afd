// Constraint rules that do not need the policy: shape and operator validation at grant time,
// narrowing agent proposals by server-imposed constraints, and whether a grant already covers a
// request (protocol §8.4). Evaluation against arguments happens in the Rego policy.
import { isDeepStrictEqual } from 'node:util';
import { ApiError } from '../errors.ts';
import type { OperatorRegistry } from '../operators/registry.ts';
import { invisibleCharacters, jsonText } from './consent-text.ts';
import { checkConstraintSize } from './limits.ts';
import type { Constraints } from './types.ts';

const MAX_CONSTRAINED_FIELDS = 64;
const FIELD_NAME = /^[^\s]{1,128}$/;

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

/** Operator names used in `constraints` that the registry does not know, in first-seen order. */
export function unknownOperators(constraints: Constraints | undefined | null, registry: OperatorRegistry): string[] {
  if (!constraints) return [];
  const unknown = new Set<string>();
  for (const value of Object.values(constraints)) {
    if (!isPlainObject(value)) continue;
    for (const op of Object.keys(value)) if (!registry.has(op)) unknown.add(op);
  }
  return [...unknown];
}

/**
 * True when `constraints` use an operator the registry does not know: unknownOperators(...).length
 * > 0, answered without building the list. Execute asks it of every active grant on every call,
 * and the answer is almost always no.
 */
export function usesUnknownOperator(constraints: Constraints | undefined | null, registry: Pick<OperatorRegistry, 'has'>): boolean {
  if (!constraints) return false;
  for (const field in constraints) {
    if (!Object.hasOwn(constraints, field)) continue;
    const value = constraints[field];
    if (!isPlainObject(value)) continue;
    for (const op in value) if (Object.hasOwn(value, op) && !registry.has(op)) return true;
  }
  return false;
}

/**
 * 400 unknown_constraint_operator: names the unknown operators (`unknown_operators`) and every one
 * this server knows now (`known_operators`, built-ins and plugins), so the client can fix its
 * request without reading the server's configuration.
 */
export function unknownOperatorsError(message: string, unknown: string[], registry: Pick<OperatorRegistry, 'names'>): ApiError {
  const known = registry.names().sort();
  return new ApiError('unknown_constraint_operator', `${message}; this server knows: ${known.join(', ')}`, { unknown_operators: unknown, known_operators: known });
}

/**
 * The arguments a capability declares, by name; undefined for a capability the catalog does not
 * have (the policy refuses those). Names are compared exactly, code point for code point.
 */
type DeclaredArguments = (capability: string) => ReadonlySet<string> | undefined;

/**
 * Validates the constraints proposed for each capability: 400 unknown_constraint_operator listing
 * every unknown operator across `all` (so the client fixes them in one pass), then 400
 * invalid_request for constraints over the size limits (domain/limits.ts), a constraint on an
 * argument the capability does not declare, or an operand that fails its operator's schema,
 * naming the field and operator. Size comes before schemas: a schema never sees an oversized
 * operand. A constraint on an undeclared name would be shown to a person as if it limited the call
 * while execute never reads it (a look-alike of a declared name, say), so only declared names pass.
 */
export function validateConstraints(
  all: ReadonlyArray<{ capability: string; constraints: Constraints | undefined }>, registry: OperatorRegistry, declared: DeclaredArguments,
): void {
  const unknown = [...new Set(all.flatMap((c) => unknownOperators(c.constraints, registry)))];
  if (unknown.length > 0) throw unknownOperatorsError(`unknown constraint operator(s): ${unknown.join(', ')}`, unknown, registry);
  for (const { capability, constraints } of all) checkConstraintSize(capability, constraints);
  for (const { capability, constraints } of all) {
    if (!constraints) continue;
    const fields = Object.entries(constraints);
    if (fields.length > MAX_CONSTRAINED_FIELDS) throw new ApiError('invalid_request', `at most ${MAX_CONSTRAINED_FIELDS} constrained fields`);
    const arguments_ = declared(capability);
    for (const [field, value] of fields) {
      if (!FIELD_NAME.test(field)) throw new ApiError('invalid_request', `constraint field ${JSON.stringify(field.slice(0, 64))} is not a valid argument name`);
      if (arguments_ !== undefined && !arguments_.has(field)) throw undeclaredConstraint(capability, field, arguments_);
      const hidden = hiddenCharacters(value);
      if (hidden.length > 0) {
        throw new ApiError('invalid_request', `constraint on ${field} holds characters a person cannot see (${hidden.join(', ')}), so it could not be shown as it is enforced`);
      }
      if (!isPlainObject(value)) continue;
      if (Object.keys(value).length === 0) throw new ApiError('invalid_request', `constraint on ${field} has no operator`);
      for (const [op, operand] of Object.entries(value)) {
        const result = registry.get(op)?.operand.safeParse(operand);
        if (result && !result.success) {
          throw new ApiError('invalid_request', `operand of ${op} on field ${field} is invalid: ${result.error.issues[0]?.message ?? 'bad operand'}`);
        }
      }
    }
  }
}

/** The invisible characters in any string of an operand, keys included (bounded: constraints are small). */
function hiddenCharacters(value: unknown): string[] {
  if (typeof value === 'string') return invisibleCharacters(value);
  if (value === null || typeof value !== 'object') return [];
  const found = new Set<string>();
  for (const [key, child] of Object.entries(value)) {
    if (!Array.isArray(value)) for (const c of invisibleCharacters(key)) found.add(c);
    for (const c of hiddenCharacters(child)) found.add(c);
  }
  return [...found];
}

function undeclaredConstraint(capability: string, field: string, declared: ReadonlySet<string>): ApiError {
  const names = [...declared].sort();
  const offer = names.length === 0 ? `${capability} declares no arguments, so it takes no constraints` : `it declares ${names.join(', ')}`;
  return new ApiError('invalid_request', `constraint field ${jsonText(field.slice(0, 64))} is not an argument of ${capability}; ${offer}`);
}

/** Exact values are shorthand for {eq: value}. */
function asOperators(value: unknown): Record<string, unknown> {
  return isPlainObject(value) ? value : { eq: value };
}

function narrowOperator(op: string, proposed: unknown, imposed: unknown): unknown {
  if ((op === 'max' || op === 'min') && typeof proposed === 'number' && typeof imposed === 'number') {
    return op === 'max' ? Math.min(proposed, imposed) : Math.max(proposed, imposed);
  }
  if (op === 'in' && Array.isArray(proposed) && Array.isArray(imposed)) {
    return proposed.filter((p) => imposed.some((i) => isDeepStrictEqual(p, i)));
  }
  if (op === 'not_in' && Array.isArray(proposed) && Array.isArray(imposed)) {
    return [...proposed, ...imposed.filter((i) => !proposed.some((p) => isDeepStrictEqual(p, i)))];
  }
  // eq and operators without a known meet: the server's operand wins (it may only narrow).
  return imposed;
}

/**
 * The effective constraints when the server imposes `imposed` on an agent's `proposed` ones: the
 * intersection, never wider than either (protocol §8.4). Fields only one side constrains are kept.
 */
export function narrowConstraints(proposed: Constraints | null | undefined, imposed: Constraints | null | undefined): Constraints | undefined {
  if (!imposed || Object.keys(imposed).length === 0) return proposed ?? undefined;
  if (!proposed) return { ...imposed };
  const result: Constraints = { ...proposed };
  for (const [field, imposedValue] of Object.entries(imposed)) {
    if (!(field in proposed)) {
      result[field] = imposedValue;
      continue;
    }
    const merged = { ...asOperators(proposed[field]) };
    for (const [op, operand] of Object.entries(asOperators(imposedValue))) {
      merged[op] = op in merged ? narrowOperator(op, merged[op], operand) : operand;
    }
    result[field] = merged;
  }
  return result;
}

/**
 * Whether an active grant already covers a request: an unconstrained grant covers everything; a
 * constrained one covers only the same constraints (a request for wider ones is a new request).
 */
export function grantCovers(granted: Constraints | undefined, requested: Constraints | undefined): boolean {
  if (!granted || Object.keys(granted).length === 0) return true;
  return requested !== undefined && isDeepStrictEqual(granted, requested);
}
