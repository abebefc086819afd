// Bounds on what one agent can make agentgate store and evaluate (SECURITY.md). Every grant
// is read on each execute of its capability and handed to the policy, so an agent that could pile
// up large or many grants could make every execute slow, or exhaust the policy's memory. Refusals
// are 400 invalid_request naming the limit, so a client knows which one it hit.
import { ApiError } from '../errors.ts';
import type { Constraints, GrantRecord } from './types.ts';

export const GRANT_LIMITS = {
  /** Serialized JSON size of one grant's constraints. */
  constraintBytes: 4096,
  /** Nesting of one grant's constraints: {field: {operator: operand}} is 3; operands may nest a little. */
  constraintDepth: 6,
  /** Items in a list operand (in, not_in, and plugin operands alike). */
  listOperandItems: 256,
  /** Active or pending grants one agent may hold for one capability. */
  liveGrantsPerCapability: 8,
  /** Active or pending grants one agent may hold in all. */
  liveGrantsPerAgent: 64,
} as const;

const tooLarge = (message: string) => new ApiError('invalid_request', message);

/** Depth of a JSON value: a scalar is 0, `{}` and `[]` are 1. Callers pass values of bounded depth. */
function jsonDepth(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0;
  let deepest = 0;
  for (const child of Object.values(value)) deepest = Math.max(deepest, jsonDepth(child));
  return deepest + 1;
}

/** The largest list anywhere inside a JSON value. */
function longestList(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0;
  let longest = Array.isArray(value) ? value.length : 0;
  for (const child of Object.values(value)) longest = Math.max(longest, longestList(child));
  return longest;
}

/** Refuses constraints over the size, depth or list-length limits, naming the capability and limit. */
export function checkConstraintSize(capability: string, constraints: Constraints | undefined | null): void {
  if (!constraints) return;
  const bytes = Buffer.byteLength(JSON.stringify(constraints));
  if (bytes > GRANT_LIMITS.constraintBytes) {
    throw tooLarge(`constraints of ${capability} are ${bytes} bytes; the limit is ${GRANT_LIMITS.constraintBytes} bytes per grant`);
  }
  if (jsonDepth(constraints) > GRANT_LIMITS.constraintDepth) {
    throw tooLarge(`constraints of ${capability} nest deeper than the limit of ${GRANT_LIMITS.constraintDepth} levels`);
  }
  if (longestList(constraints) > GRANT_LIMITS.listOperandItems) {
    throw tooLarge(`constraints of ${capability} hold a list longer than the limit of ${GRANT_LIMITS.listOperandItems} items`);
  }
}

/** Refuses adding `adding` to an agent holding `existing` when a live-grant limit would be passed. */
export function checkLiveGrantLimits(existing: readonly GrantRecord[], adding: ReadonlyArray<{ capability: string }>): void {
  if (adding.length === 0) return;
  const live = existing.filter((g) => g.status === 'active' || g.status === 'pending');
  if (live.length + adding.length > GRANT_LIMITS.liveGrantsPerAgent) {
    throw tooLarge(`an agent holds at most ${GRANT_LIMITS.liveGrantsPerAgent} active or pending grants (limit liveGrantsPerAgent)`);
  }
  const perCapability = new Map<string, number>();
  for (const g of [...live, ...adding]) perCapability.set(g.capability, (perCapability.get(g.capability) ?? 0) + 1);
  for (const [capability, count] of perCapability) {
    if (count > GRANT_LIMITS.liveGrantsPerCapability) {
      throw tooLarge(`an agent holds at most ${GRANT_LIMITS.liveGrantsPerCapability} active or pending grants for ${capability} (limit liveGrantsPerCapability)`);
    }
  }
}
